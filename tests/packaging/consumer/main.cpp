// A user's first program against an installed mixgrad: an MLP on a seeded 4-class problem,
// trained 60 steps with AdamW under bf16 autocast. Prints the logits' dtype and the first and last
// loss, and fails unless the logits were bf16 and the loss fell by more than half.
#include <mixgrad/mixgrad.h>

#include <cstdio>

int main() {
  mg::manual_seed(0);
  mg::Tensor x = mg::randn({256, 8});                             // [B, 8]
  mg::Tensor y = mg::argmax(mg::narrow(x, 1, 0, 4), 1);           // [B] i64: which of x[:, :4] is largest
  mg::nn::Sequential mlp({mg::nn::make<mg::nn::Linear>({.in = 8, .out = 64}), mg::nn::make<mg::nn::ReLU>(),
                          mg::nn::make<mg::nn::Linear>({.in = 64, .out = 4})});
  mg::optim::AdamW opt(mlp.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  float first = 0, last = 0;
  mg::DType logits_dtype = mg::DType::F32;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    mg::Tensor loss;
    {
      mg::amp::Autocast autocast({.dtype = mg::DType::BF16});
      mg::Tensor logits = mlp.forward(x);                          // [B, 4], bf16 (linear: lower)
      logits_dtype = logits.dtype();
      loss = mg::cross_entropy(logits, y);                         // [] f32 (losses: fp32)
    }
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
  }
  std::printf("mixgrad consumer: logits %s, loss %.4f -> %.4f\n", mg::dtype_name(logits_dtype), first, last);
  return logits_dtype == mg::DType::BF16 && last < 0.5f * first ? 0 : 1;
}
