// The umbrella header: tensors, factories, autograd, every public op, the nn library and model zoo,
// optimizers, data pipelines, checkpoints and amp (Autocast, GradScaler).
//
//   #include <mixgrad/mixgrad.h>
//   mg::Tensor y = mg::gelu(mg::linear(x, w, b));
#pragma once

#include "mixgrad/amp/autocast.h"         // amp::Autocast
#include "mixgrad/amp/grad_scaler.h"      // amp::GradScaler
#include "mixgrad/amp/initialize.h"       // amp::initialize, scale_loss, forward (Apex-style O0–O3)
#include "mixgrad/amp/overflow_tracer.h"  // amp::OverflowTracer
#include "mixgrad/amp/precision_plan.h"   // amp::precision_plan
#include "mixgrad/amp/update_averaged.h"  // amp::update_averaged (SWA/EMA of O2 masters)
#include "mixgrad/autograd/backward_callbacks.h"  // current_pass_id, at_pass_end, JoinRunningPass
#include "mixgrad/autograd/engine.h"      // backward, grad
#include "mixgrad/autograd/grad_mode.h"   // NoGradGuard, EnableGradGuard
#include "mixgrad/autograd/hooks.h"       // queue_callback, post-accumulate-grad hooks, in_backward
#include "mixgrad/core/factory.h"         // zeros, ones, randn, from_vector, manual_seed, ...
#include "mixgrad/core/parallel.h"        // set_num_threads
#include "mixgrad/core/pinned_memory.h"   // empty_pinned, check_pin_memory_available
#include "mixgrad/core/storage.h"         // cpu_memory_stats
#include "mixgrad/core/tensor.h"          // Tensor, DType, Device
#include "mixgrad/cuda/conv_settings.h"   // cuda::set_cudnn_benchmark, set_cudnn_deterministic
#include "mixgrad/cuda/cuda.h"            // cuda::is_available, streams, events, memory_stats
#include "mixgrad/data/fashion_mnist.h"   // data::FashionMnist
#include "mixgrad/data/loader.h"          // data::DataLoader
#include "mixgrad/data/text/verse_datasets.h"  // data::read_kjv, WordPiece, MlmCollator, verse datasets
#include "mixgrad/io/checkpoint.h"        // save_checkpoint, load_checkpoint (versioned, atomic)
#include "mixgrad/io/hf_bert.h"           // load_hf_bert (a Hugging Face BERT directory)
#include "mixgrad/io/safetensors.h"       // save_safetensors, load_safetensors
#include "mixgrad/nn/models/bert.h"       // nn::models::BertModel, BertForMaskedLM, BertForSequenceClassification
#include "mixgrad/nn/models/bert_hf.h"    // nn::models::bert_state_dict_from_hf (Hugging Face checkpoints)
#include "mixgrad/nn/models/resnet.h"     // nn::models::ResNet (CIFAR and ImageNet style)
#include "mixgrad/nn/nn.h"                // nn::Module, layers, containers, losses, functional, init
#include "mixgrad/optim/optim.h"          // optim::SGD, Adam, AdamW, LAMB, RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, schedulers, clip_grad_norm_
#include "mixgrad/ops/attention.h"        // scaled_dot_product_attention
#include "mixgrad/ops/checkpoint.h"       // checkpoint: activations recomputed in backward
#include "mixgrad/ops/custom_function.h"  // Function<Derived>: user-defined forward/backward
#include "mixgrad/ops/conv.h"             // conv2d, conv_transpose2d, pooling
#include "mixgrad/ops/conv1d.h"           // conv1d, conv_transpose1d, 1-D pooling
#include "mixgrad/ops/distance.h"         // cosine_similarity, pairwise_distance
#include "mixgrad/ops/interpolate.h"      // interpolate (nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area)
#include "mixgrad/ops/logical.h"          // logical_not/and/or/xor, ~ & | ^ on masks, isnan/isinf/isfinite, all, any, isclose
#include "mixgrad/ops/loss.h"             // softmax, log_softmax, cross_entropy and the other losses
#include "mixgrad/ops/linear_cross_entropy.h"  // fused, chunked linear + cross_entropy (LM heads)
#include "mixgrad/ops/margin_losses.h"    // margin, embedding, triplet and likelihood losses
#include "mixgrad/ops/norm.h"             // layer/rms/batch/group norm, embedding, dropout
#include "mixgrad/ops/ops.h"              // elementwise, reductions, linear algebra, views, indexing
#include "mixgrad/ops/rearrange.h"        // flip, roll, repeat, tile, tril, triu
#include "mixgrad/ops/sort.h"             // argsort, sort, topk
#include "mixgrad/ops/bitwise.h"          // bitwise_and/or/xor/not, shifts, << >>
#include "mixgrad/ops/nonzero.h"          // nonzero, argwhere, masked_select, count_nonzero
#include "mixgrad/ops/quantile.h"         // quantile, nanquantile
#include "mixgrad/ops/unique.h"           // unique, unique_consecutive
#include "mixgrad/ops/pad.h"              // pad (constant, reflect, replicate, circular)
#include "mixgrad/ops/fractional_max_pool.h"  // fractional_max_pool2d/3d (+ _with_indices)
#include "mixgrad/ops/grid_sample.h"      // grid_sample, affine_grid
#include "mixgrad/ops/lp_pool.h"          // lp_pool1d, lp_pool2d, lp_pool3d
#include "mixgrad/ops/max_unpool.h"       // max_unpool1d/2d/3d, max_pool1d_indices
