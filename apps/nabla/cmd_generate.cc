// `nabla generate CONFIG --checkpoint CKPT --prompt TEXT`: text sampled from
// a byte-level language model that `nabla run CONFIG` trained.
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "nabla/error.h"
#include "nabla/train/generate.h"
#include "nabla/train/run_config.h"

namespace nabla::app {

Command GenerateCommand() {
  struct Args {
    std::string config;
    train::GenerateOptions o;
    int64_t seed = 0;
  };
  auto a = std::make_shared<Args>();
  Command c("generate", "Sample text from a checkpoint of a model trained on a text dataset");
  c.Positional("CONFIG", &a->config, "The run config that trained the model (data.format: text)").Required();
  c.Option("--checkpoint", &a->o.checkpoint, "A checkpoint file, or a checkpoint folder (its newest)", "CKPT")
      .Required();
  c.Option("--prompt", &a->o.prompt, "The text to continue (default: empty)", "TEXT");
  c.Option("--tokens", &a->o.tokens, "Bytes to draw (default 200)", "N");
  c.Option("--temperature", &a->o.temperature, "Divides the scores; 0 always takes the most likely (default 1)", "T");
  c.Option("--top-k", &a->o.top_k, "Draw among the K most likely bytes only; 0: all (default)", "K");
  c.Option("--seed", &a->seed, "Seed of the draws (default 0)", "S");
  c.SetRun([a](const GlobalOptions&) {
    NABLA_ENFORCE(a->seed >= 0, kInvalidArgument, "generate: --seed must be >= 0, but received ", a->seed);
    a->o.seed = static_cast<uint64_t>(a->seed);
    train::RunConfig config = train::LoadRunConfig(a->config);
    // The prompt goes out with the first drawn byte, so a refused config or
    // checkpoint prints nothing but its error.
    bool started = false;
    auto start = [&] {
      if (!started) std::cout << a->o.prompt;
      started = true;
    };
    train::GenerateText(config, a->o, [&](char ch) {
      start();
      std::cout << ch << std::flush;
    });
    start();
    std::cout << std::endl;
    return 0;
  });
  return c;
}

}  // namespace nabla::app
