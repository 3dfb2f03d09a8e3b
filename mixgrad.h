// The umbrella header: tensors, factories, autograd, every public op, the nn library and model zoo,
// optimizers, data pipelines, checkpoints and amp (Autocast, GradScaler).
//
//   #include "mixgrad.h"
//   mg::Tensor y = mg::gelu(mg::linear(x, w, b));
#pragma once

#include "amp/autocast.h"         // amp::Autocast
#include "amp/grad_scaler.h"      // amp::GradScaler
#include "amp/initialize.h"       // amp::initialize, scale_loss, forward (Apex-style O0–O3)
#include "amp/overflow_tracer.h"  // amp::OverflowTracer
#include "amp/precision_plan.h"   // amp::precision_plan
#include "autograd/engine.h"      // backward, grad
#include "autograd/grad_mode.h"   // NoGradGuard, EnableGradGuard
#include "core/factory.h"         // zeros, ones, randn, from_vector, manual_seed, ...
#include "core/parallel.h"        // set_num_threads
#include "core/storage.h"         // cpu_memory_stats
#include "core/tensor.h"          // Tensor, DType, Device
#include "data/fashion_mnist.h"   // data::FashionMnist
#include "data/loader.h"          // data::DataLoader
#include "data/text/verse_datasets.h"  // data::read_kjv, WordPiece, MlmCollator, verse datasets
#include "io/checkpoint.h"        // save_checkpoint, load_checkpoint (versioned, atomic)
#include "io/safetensors.h"       // save_safetensors, load_safetensors
#include "nn/models/bert.h"       // nn::models::BertModel, BertForMaskedLM, BertForSequenceClassification
#include "nn/models/resnet.h"     // nn::models::ResNet (CIFAR and ImageNet style)
#include "nn/nn.h"                // nn::Module, layers, containers, losses, functional, init
#include "optim/optim.h"          // optim::SGD, Adam, AdamW, LAMB, schedulers, clip_grad_norm_
#include "ops/attention.h"        // scaled_dot_product_attention
#include "ops/custom_function.h"  // Function<Derived>: user-defined forward/backward
#include "ops/conv.h"             // conv2d, conv_transpose2d, pooling
#include "ops/loss.h"             // softmax, log_softmax, cross_entropy and the other losses
#include "ops/norm.h"             // layer/rms/batch/group norm, embedding, dropout
#include "ops/ops.h"              // elementwise, reductions, linear algebra, views, indexing
