// Everything in optim: the optimizers (SGD, Adam, AdamW, LAMB, RMSprop, Adagrad, Adamax, NAdam, RAdam,
// Adadelta, Rprop, ASGD, Adafactor, Muon, and LBFGS with its closure-driven step), learning-rate schedulers (SWALR for weight averaging among them) and gradient clipping. See docs/optim.md.
//
//   #include "optim/optim.h"
//   mg::optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
#pragma once
#include "mixgrad/optim/adadelta.h"
#include "mixgrad/optim/adafactor.h"
#include "mixgrad/optim/adagrad.h"
#include "mixgrad/optim/adam.h"
#include "mixgrad/optim/adamax.h"
#include "mixgrad/optim/asgd.h"
#include "mixgrad/optim/clip_grad.h"
#include "mixgrad/optim/lamb.h"
#include "mixgrad/optim/lbfgs.h"
#include "mixgrad/optim/lr_scheduler.h"
#include "mixgrad/optim/muon.h"
#include "mixgrad/optim/nadam.h"
#include "mixgrad/optim/radam.h"
#include "mixgrad/optim/optimizer.h"
#include "mixgrad/optim/reduce_lr_on_plateau.h"
#include "mixgrad/optim/rmsprop.h"
#include "mixgrad/optim/rprop.h"
#include "mixgrad/optim/sgd.h"
#include "mixgrad/optim/swa_lr.h"
