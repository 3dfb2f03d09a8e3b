// Everything in nn: modules, layers, containers, losses, functional and init.
//
//   #include "nn/nn.h"
//   auto net = mg::nn::Sequential({mg::nn::make<mg::nn::Linear>({.in = 4, .out = 2})});
#pragma once
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/container.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/normalization.h"
#include "nn/pooling.h"
#include "nn/transformer.h"
