// Everything in nn: modules, layers, containers, losses, functional and init.
//
//   #include "nn/nn.h"
//   auto net = mg::nn::Sequential({mg::nn::make<mg::nn::Linear>({.in = 4, .out = 2})});
#pragma once
#include "mixgrad/nn/activation.h"
#include "mixgrad/nn/attention.h"
#include "mixgrad/nn/checkpoint_sequential.h"
#include "mixgrad/nn/container.h"
#include "mixgrad/nn/conv.h"
#include "mixgrad/nn/conv1d.h"
#include "mixgrad/nn/dropout.h"
#include "mixgrad/nn/functional.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/nn/linear.h"
#include "mixgrad/nn/loss.h"
#include "mixgrad/nn/margin_loss.h"
#include "mixgrad/nn/module.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/nn/padding.h"
#include "mixgrad/nn/pooling.h"
#include "mixgrad/nn/rnn.h"
#include "mixgrad/nn/transformer.h"
#include "mixgrad/nn/upsample.h"
