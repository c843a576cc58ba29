#pragma once
// Sampling text from a byte-level language model trained by `nabla run` on a
// text dataset (docs/run-config.md, format text): the model reads a window
// of seq_len bytes and scores the next byte at every position.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nabla/train/run_config.h"

namespace nabla::train {

struct GenerateOptions {
  std::string checkpoint;    // a checkpoint file, or a checkpoint folder (its newest)
  std::string prompt;        // the text to continue (may be empty)
  int64_t tokens = 200;      // bytes to draw
  double temperature = 1.0;  // 0: always the most likely byte
  int64_t top_k = 0;         // draw among the k most likely bytes; 0: among all
  uint64_t seed = 0;
};

// Draws one token from `logits` (one row of scores): scaled by 1/temperature,
// cut to the top k, softmax, then an inverse-CDF draw with a uniform from
// `rng`'s next output (53 bits), so a seed gives the same text everywhere.
int64_t SampleToken(const float* logits, int64_t vocab, double temperature, int64_t top_k, uint64_t random_bits);

// Loads the program and parameters the config and checkpoint name, then
// appends `tokens` bytes to the prompt one at a time: the last seq_len bytes
// (padded after the end; the model is causal, so padding cannot change the
// scores before it) go in, the scores at the last real position pick the
// next byte. `emit` sees each byte as it is drawn. Returns the drawn bytes.
std::string GenerateText(const RunConfig& config, const GenerateOptions& options,
                         const std::function<void(char)>& emit = {});

}  // namespace nabla::train
