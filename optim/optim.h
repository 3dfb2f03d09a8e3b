// Everything in optim: the optimizers (SGD, Adam, AdamW, LAMB), learning-rate schedulers and
// gradient clipping. See docs/optim.md.
//
//   #include "optim/optim.h"
//   mg::optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
#pragma once
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lamb.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
