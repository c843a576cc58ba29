// The update ops (sgd, momentum, adam, adamw), with gradient clipping and L2
// regularization before them, and the learning rate they read.
#include <algorithm>
#include <cmath>
#include <vector>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/train.h"
#include "op_builder.h"

namespace nabla::train {

namespace {

// Paddle's GradientClipByGlobalNorm from ops (squared_l2_norm per gradient,
// sum, sqrt): every gradient times clip / max(global_norm, clip), with
// max(a, c) = relu(a - c) + c as the op set has no elementwise_max.
std::vector<std::string> ClipByGlobalNorm(OpBuilder& b, const ParamGrads& pg, double clip) {
  std::vector<std::string> sums;
  for (const auto& [p, g] : pg) {
    b.Append("squared_l2_norm", {{"X", {g}}}, {{"Out", {g + "@clip@sq_norm"}}});
    sums.push_back(g + "@clip@sq_norm");
  }
  const DType dtype = b.Block().FindVar(pg.front().second)->GetDType();
  b.Append("sum", {{"X", sums}}, {{"Out", {"clip@global_norm_sq"}}});
  b.Append("sqrt", {{"X", {"clip@global_norm_sq"}}}, {{"Out", {"clip@global_norm"}}});
  b.Append(
      "fill_constant", {}, {{"Out", {"clip@max_norm"}}},
      {{"shape", std::vector<int>{1}}, {"dtype", std::string(DTypeName(dtype))}, {"value", static_cast<float>(clip)}});
  b.Append("elementwise_sub", {{"X", {"clip@global_norm"}}, {"Y", {"clip@max_norm"}}}, {{"Out", {"clip@excess"}}});
  b.Append("relu", {{"X", {"clip@excess"}}}, {{"Out", {"clip@excess_pos"}}});
  b.Append("elementwise_add", {{"X", {"clip@excess_pos"}}, {"Y", {"clip@max_norm"}}}, {{"Out", {"clip@denom"}}});
  b.Append("elementwise_div", {{"X", {"clip@max_norm"}}, {"Y", {"clip@denom"}}}, {{"Out", {"clip@factor"}}});
  std::vector<std::string> clipped;
  for (const auto& [p, g] : pg) {
    b.Append("elementwise_mul", {{"X", {g}}, {"Y", {"clip@factor"}}}, {{"Out", {g + "@clipped"}}});
    clipped.push_back(g + "@clipped");
  }
  return clipped;
}

// adam, or adamw with weight_decay as its decoupled decay (coeff).
void AppendAdam(OpBuilder& b, const OptimizerOptions& o, const std::string& p, const std::string& g) {
  const VarDesc* pv = b.Block().FindVar(p);
  const DType dtype = pv->GetDType();
  const std::string m1 = p + "@moment1", m2 = p + "@moment2", b1 = p + "@beta1_pow", b2 = p + "@beta2_pow";
  b.FilledVar(m1, pv->GetShape(), dtype, 0.0f);
  b.FilledVar(m2, pv->GetShape(), dtype, 0.0f);
  b.FilledVar(b1, {1}, dtype, static_cast<float>(o.beta1));
  b.FilledVar(b2, {1}, dtype, static_cast<float>(o.beta2));
  VarNameMap outs = {{"ParamOut", {p}}, {"Moment1Out", {m1}}, {"Moment2Out", {m2}}};
  // Newer Paddle updates the beta powers inside adam; older versions
  // append a scale op per power. Follow whichever schema is loaded.
  const bool pow_outputs = b.OpHasOutput(o.type, "Beta1PowOut");
  if (pow_outputs) {
    outs["Beta1PowOut"] = {b1};
    outs["Beta2PowOut"] = {b2};
  }
  AttributeMap attrs = {{"beta1", static_cast<float>(o.beta1)},
                        {"beta2", static_cast<float>(o.beta2)},
                        {"epsilon", static_cast<float>(o.epsilon)}};
  if (o.type == "adamw") {
    attrs["coeff"] = static_cast<float>(o.weight_decay);
    attrs["with_decay"] = o.weight_decay > 0;
  }
  b.Append(o.type,
           {{"Param", {p}},
            {"Grad", {g}},
            {"LearningRate", {kLearningRateVar}},
            {"Moment1", {m1}},
            {"Moment2", {m2}},
            {"Beta1Pow", {b1}},
            {"Beta2Pow", {b2}}},
           std::move(outs), std::move(attrs));
  if (!pow_outputs) {
    b.Append("scale", {{"X", {b1}}}, {{"Out", {b1}}}, {{"scale", static_cast<float>(o.beta1)}});
    b.Append("scale", {{"X", {b2}}}, {{"Out", {b2}}}, {{"scale", static_cast<float>(o.beta2)}});
  }
}

}  // namespace

void AppendOptimizer(ProgramDesc& program, const ParamGrads& pg, const OptimizerOptions& o) {
  NABLA_ENFORCE(o.type == "sgd" || o.type == "momentum" || o.type == "adam" || o.type == "adamw", kInvalidArgument,
                "the optimizer type must be one of sgd, momentum, adam, adamw, but received '", o.type, "'");
  // The ranges a run config's optimizer keys are held to (run_config.cc
  // checks them first, with positions): a program built through the
  // library must not get what `nabla run` refuses (a negative decay that
  // silently did nothing, or gradient ascent).
  auto check = [&](bool ok, const char* key, double v, const char* range) {
    NABLA_ENFORCE(ok && std::isfinite(v), kInvalidArgument, "the ", o.type, " optimizer's ", key, " must be ", range,
                  ", but received ", v);
  };
  check(o.lr > 0, "lr", o.lr, "positive");
  check(o.momentum >= 0, "momentum", o.momentum, ">= 0");
  check(o.beta1 >= 0 && o.beta1 < 1, "beta1", o.beta1, "in [0, 1)");
  check(o.beta2 >= 0 && o.beta2 < 1, "beta2", o.beta2, "in [0, 1)");
  check(o.epsilon > 0, "epsilon", o.epsilon, "positive");
  check(o.weight_decay >= 0, "weight_decay", o.weight_decay, ">= 0");
  check(o.clip_global_norm >= 0, "clip_global_norm", o.clip_global_norm, ">= 0 (0: no clipping)");
  NABLA_ENFORCE(!o.nesterov || o.type == "momentum", kInvalidArgument,
                "nesterov applies to the momentum optimizer, but the optimizer type is '", o.type, "'");
  NABLA_ENFORCE(!pg.empty(), kInvalidArgument, "the ", o.type,
                " optimizer has no (parameter, gradient) pair to update; did AppendBackward find no parameter?");
  OpBuilder b(program);
  BlockDesc& block = b.Block();
  for (const auto& [p, g] : pg) {
    NABLA_ENFORCE(block.FindVar(p) != nullptr && block.FindVar(g) != nullptr, kNotFound, "the optimizer updates '", p,
                  "' with '", g, "', but the root block lacks ", block.FindVar(p) ? g : p);
  }
  b.FilledVar(kLearningRateVar, {1}, block.FindVar(pg.front().first)->GetDType(), static_cast<float>(o.lr));

  std::vector<std::string> grads;
  for (const auto& [p, g] : pg) grads.push_back(g);
  // Paddle's order: clip the raw gradients, then add the L2 term.
  if (o.clip_global_norm > 0) grads = ClipByGlobalNorm(b, pg, o.clip_global_norm);
  for (size_t i = 0; i < pg.size(); ++i) {
    const std::string& p = pg[i].first;
    std::string g = grads[i];
    // adamw decays the parameter itself (decoupled), not through the gradient.
    if (o.weight_decay > 0 && o.type != "adamw") {
      b.Append("scale", {{"X", {p}}}, {{"Out", {p + "@decay"}}}, {{"scale", static_cast<float>(o.weight_decay)}});
      b.Append("sum", {{"X", {g, p + "@decay"}}}, {{"Out", {p + "@GRAD@regularized"}}});
      g = p + "@GRAD@regularized";
    }
    if (o.type == "sgd") {
      b.Append("sgd", {{"Param", {p}}, {"Grad", {g}}, {"LearningRate", {kLearningRateVar}}}, {{"ParamOut", {p}}});
    } else if (o.type == "momentum") {
      const VarDesc* pv = block.FindVar(p);
      const std::string v = p + "@velocity";
      b.FilledVar(v, pv->GetShape(), pv->GetDType(), 0.0f);
      b.Append("momentum", {{"Param", {p}}, {"Grad", {g}}, {"Velocity", {v}}, {"LearningRate", {kLearningRateVar}}},
               {{"ParamOut", {p}}, {"VelocityOut", {v}}},
               {{"mu", static_cast<float>(o.momentum)}, {"use_nesterov", o.nesterov}});
    } else {
      AppendAdam(b, o, p, g);
    }
  }
}

double ScheduledLearningRate(double lr0, const LrScheduleOptions& s, int64_t step, int64_t epoch, int64_t planned) {
  double lr = lr0;
  if (s.type == "step") {
    NABLA_ENFORCE(s.every_epochs >= 1, kInvalidArgument, "a step schedule's period must be at least 1 epoch, but is ",
                  s.every_epochs);
    lr *= std::pow(s.gamma, static_cast<double>(epoch / s.every_epochs));
  } else if (s.type == "exponential") {
    lr *= std::pow(s.gamma, static_cast<double>(epoch));
  } else if (s.type == "cosine") {
    const double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, planned)));
    lr = s.final_lr + (lr0 - s.final_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  } else {
    NABLA_ENFORCE(s.type == "constant", kInvalidArgument,
                  "the learning-rate schedule must be one of constant, step, exponential, cosine, but received '",
                  s.type, "'");
  }
  if (step < s.warmup_steps) lr *= static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  return lr;
}

void SetLearningRate(Scope& scope, double lr) {
  Variable* var = scope.FindVar(kLearningRateVar);
  NABLA_ENFORCE(var != nullptr, kNotFound, "no var '", kLearningRateVar,
                "' in the scope: run the startup program of a program built by AppendOptimizer first");
  Tensor& t = var->GetTensor();
  NABLA_ENFORCE(t.IsInitialized() && t.Numel() == 1 && IsFloating(t.GetDType()), kPreconditionNotMet,
                "the learning rate var must hold one float element, but holds ", t.DebugString());
  const float f = static_cast<float>(lr);
  const bool f64 = t.GetDType() == DType::kFloat64;
  t.GetDevice()->CopyFromHost(t.RawData(), f64 ? static_cast<const void*>(&lr) : &f, f64 ? sizeof lr : sizeof f);
}

}  // namespace nabla::train
