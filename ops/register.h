// The explicit registration functions that init() calls once (DESIGN §1: never static
// initialisers). One per op group for rules, one per group for CPU kernels.
#pragma once

namespace mg {

void register_elementwise_rules();
void register_activation_rules();
void register_reduce_rules();
void register_linalg_rules();
void register_view_rules();
void register_copy_rules();
void register_indexing_rules();
void register_sort_rules();
void register_nonzero_rules();
void register_bitwise_rules();
void register_loss_rules();
void register_conv_rules();
void register_norm_rules();
void register_attention_rules();  // ops/attention_fused.cpp

void register_cpu_kernels();  // calls the per-group functions below
namespace cpu {
void register_elementwise_kernels();
void register_reduce_kernels();
void register_reduce_kernels_extra();
void register_linalg_kernels();
void register_copy_kernels();
void register_indexing_kernels();
void register_sort_kernels();
void register_nonzero_kernels();
void register_cumprod_kernels();
void register_loss_kernels();
void register_conv_kernels();
void register_norm_kernels();
void register_attention_kernels();
}  // namespace cpu

}  // namespace mg
