// The tape's grad nodes: grad templates from each op's GradOpDescMaker,
// recording a call, and Backward over the recorded nodes.
#include <algorithm>
#include <mutex>
#include <queue>
#include <unordered_set>

#include "eager_internal.h"
#include "nabla/device.h"

namespace nabla::eager::detail {

namespace {
std::atomic<uint64_t> g_next_seq{0};

std::string NodeName(const Node& n) { return StrCat("op '", n.Type(), "' (call #", n.seq, ")"); }

SlotArgs PresentArgs(const VarNameMap& slots) {
  SlotArgs out;
  for (const auto& [slot, args] : slots) {
    std::vector<bool> present;
    for (const auto& a : args) present.push_back(a != kEmptyVarName);
    out.emplace_back(slot, std::move(present));
  }
  return out;
}
}  // namespace

std::shared_ptr<const GradTemplate> BuildGradTemplate(const OpDesc& fwd, const OpInfo& info,
                                                      const std::vector<bool>& no_grad) {
  auto t = std::make_shared<GradTemplate>();
  t->fwd = fwd;
  std::unordered_map<std::string, int> index;
  std::unordered_set<std::string> no_grad_names;
  std::vector<std::string> input_args;
  size_t k = 0;
  for (const auto* slots : {&fwd.Inputs(), &fwd.Outputs()}) {
    for (const auto& [slot, args] : *slots)
      for (const auto& a : args) {
        index.emplace(a, static_cast<int>(k));
        if (no_grad.at(k)) no_grad_names.insert(a);
        if (slots == &fwd.Inputs()) input_args.push_back(a);
        ++k;
      }
    if (slots == &fwd.Inputs()) t->n_inputs = k;
  }
  t->n_outputs = k - t->n_inputs;
  {
    size_t j = 0;
    for (const auto& [slot, args] : fwd.Outputs())
      for (const auto& a : args) index.emplace(GradVarName(a), t->OutputGradIndex(j++));
  }
  t->output_grad_read.assign(t->n_outputs, false);
  int next = static_cast<int>(t->NArgs() + t->n_outputs);
  if (!info.grad_maker) {
    t->no_grad_maker = true;
    t->n_env = next;
    t->input_grads.resize(t->n_inputs);
    return t;
  }
  std::vector<std::unique_ptr<OpDesc>> ops = info.grad_maker(fwd, no_grad_names, nullptr, {});
  // Each write of an input's gradient gets its own slot, summed in order,
  // as the static builder renames and sums them.
  std::unordered_map<std::string, std::vector<int>> input_grad_writes;
  std::unordered_set<std::string> input_grad_names;
  for (const auto& a : input_args) input_grad_names.insert(GradVarName(a));
  std::vector<bool> saved(t->NArgs(), false);
  for (auto& op : ops) {
    GradTemplate::GradOp g;
    for (const auto& [slot, args] : op->Inputs()) {
      g.in.emplace_back();
      for (const auto& a : args) {
        if (a == kEmptyVarName) {
          g.in.back().push_back(-1);
          continue;
        }
        auto it = index.find(a);
        NABLA_ENFORCE(it != index.end(), kInvalidArgument, "eager: grad op '", op->Type(), "' of op '", fwd.Type(),
                      "' reads '", a, "', which neither the forward op nor an earlier grad op provides");
        NABLA_ENFORCE(!(input_grad_names.count(a) && input_grad_writes[a].size() > 1), kUnimplemented,
                      "eager: grad op '", op->Type(), "' of op '", fwd.Type(), "' reads '", a,
                      "', which several grad ops write");
        const int i = it->second;
        if (i < static_cast<int>(t->NArgs())) saved[i] = true;
        if (i >= static_cast<int>(t->NArgs()) && i < next && i < t->OutputGradIndex(t->n_outputs))
          t->output_grad_read[i - t->NArgs()] = true;
        g.in.back().push_back(i);
      }
    }
    for (const auto& [slot, args] : op->Outputs()) {
      g.out.emplace_back();
      for (const auto& a : args) {
        if (a == kEmptyVarName) {
          g.out.back().push_back(-1);
          continue;
        }
        int i;
        if (input_grad_names.count(a)) {
          i = next++;
          input_grad_writes[a].push_back(i);
          index[a] = i;
        } else {
          auto it = index.find(a);
          i = it != index.end() ? it->second : (index[a] = next++);
        }
        g.out.back().push_back(i);
      }
    }
    const SlotArgs outs = PresentArgs(op->Outputs());
    g.call = std::make_shared<PreparedCall>(op->Type(), PresentArgs(op->Inputs()), &outs, op->Attrs(), OutputCounts{});
    g.desc = std::move(op);
    t->ops.push_back(std::move(g));
  }
  for (size_t i = 0; i < t->NArgs(); ++i)
    if (saved[i]) t->saved.push_back(static_cast<int>(i));
  for (const auto& a : input_args) t->input_grads.push_back(input_grad_writes[GradVarName(a)]);
  t->n_env = next;
  return t;
}

std::vector<TapeImpl*>& ActiveTapes() {
  thread_local std::vector<TapeImpl*> tapes;
  return tapes;
}

void Record(std::shared_ptr<const GradTemplate> tmpl, const std::vector<const Tensor*>& in_tensors,
            const std::vector<std::shared_ptr<TensorImpl>>& outputs) {
  auto node = MakePooled<Node>();
  node->inputs.reserve(in_tensors.size());
  node->seq = g_next_seq.fetch_add(1, std::memory_order_relaxed);
  node->tmpl = std::move(tmpl);
  const GradTemplate& t = *node->tmpl;
  for (size_t a = 0; a < in_tensors.size(); ++a) {
    const auto& impl = TensorImpl::Of(*in_tensors[a]);
    if (!impl->requires_grad) continue;
    auto same =
        std::find_if(node->inputs.begin(), node->inputs.end(), [&](const InputEdge& e) { return e.id == impl->id; });
    if (same != node->inputs.end()) {
      same->more_args.push_back(static_cast<int>(a));
      continue;
    }
    InputEdge& e = node->inputs.emplace_back();
    e.id = impl->id;
    e.first_arg = static_cast<int>(a);
    if (!impl->grad_fn) e.shape = impl->data.GetShape();
    e.dtype = impl->data.GetDType();
    e.device = impl->data.GetDevice();
    if (impl->grad_fn) {
      e.producer = impl->grad_fn;
      const auto& outs = impl->grad_fn->outputs;
      while (e.producer_output < outs.size() && outs[e.producer_output].id != impl->id) ++e.producer_output;
      NABLA_ENFORCE(e.producer_output < outs.size(), kPreconditionNotMet, "eager: tensor '", impl->Name(),
                    "' is not among the outputs of the call that produced it");
    } else {
      e.leaf = impl;
    }
  }
  node->outputs.reserve(outputs.size());
  for (const auto& o : outputs) {
    OutputInfo& info = node->outputs.emplace_back();
    info.id = o->id;
    info.shape = o->data.GetShape();
    info.dtype = o->data.GetDType();
    info.device = o->data.GetDevice();
    info.tensor = o;
  }
  // Save exactly what the grad ops read of the forward call, as Paddle's
  // dygraph does: the buffers, not the tensors, with their versions.
  node->saved.reserve(t.saved.size());
  for (int a : t.saved) {
    const auto& impl = a < static_cast<int>(t.n_inputs) ? TensorImpl::Of(*in_tensors[a]) : outputs[a - t.n_inputs];
    SavedVar& v = node->saved.emplace_back();
    v.arg = a;
    v.data = impl->data;
    v.version = impl->SharedVersion();
    v.saved_version = v.version->load();
    v.tensor = impl;
    v.name = impl->name;
  }
  for (const auto& o : outputs)
    if (o->requires_grad) o->grad_fn = node;

  for (TapeImpl* tape : ActiveTapes()) {
    if (!tape->recording) continue;
    TapeEntry entry;
    entry.node = node;
    for (const Tensor* in : in_tensors) entry.inputs.push_back(*in);
    for (const auto& o : outputs) entry.outputs.push_back(TensorImpl::Wrap(o));
    tape->entries.push_back(std::move(entry));
  }
}

namespace {

// Two threads may run backward() into one shared leaf (Python releases the
// GIL for it): unguarded, one read-modify-write of its grad lost the other's
// (600 expected, 399-516 summed). One lock for all leaves: accumulation is a
// small part of a backward pass.
std::mutex g_accumulate_mutex;

void Accumulate(TensorImpl& target, const nabla::Tensor& grad, Device& device) {
  std::lock_guard<std::mutex> lock(g_accumulate_mutex);
  if (!target.grad) {
    target.grad = TensorImpl::Make(grad, target.Name() + kGradSuffix, false);
    return;
  }
  target.grad->data = SumInOrder({target.grad->data, grad}, device);
  target.grad->SharedVersion()->fetch_add(1);
}

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }
};

}  // namespace

void RunBackward(const std::shared_ptr<TensorImpl>& root, bool retain_graph) {
  NABLA_ENFORCE(root->requires_grad, kPreconditionNotMet, "eager: Backward from '", root->Name(),
                "', which does not require grad: no input of the calls that made it requires grad, or they ran "
                "with gradients off (NoGradGuard in C++, nabla.no_grad() in Python)");
  NABLA_ENFORCE(root->data.Numel() == 1, kInvalidArgument, "eager: Backward from '", root->Name(), "' of shape ",
                ShapeToString(root->data.GetShape()),
                ": the loss must hold exactly one element (reduce it first, e.g. with mean)");
  Device& root_device = *root->data.GetDevice();
  nabla::Tensor seed = Filled(root->data.GetShape(), root->data.GetDType(), root_device, 1.0);
  if (!root->grad_fn) {
    Accumulate(*root, seed, root_device);
    return;
  }

  // Dependency counts: how many reachable consumers each node still waits for.
  static std::atomic<uint64_t> next_walk{1};
  const uint64_t walk = next_walk.fetch_add(1, std::memory_order_relaxed);
  {
    std::vector<Node*> stack{root->grad_fn.get()};
    root->grad_fn->walk = walk;
    root->grad_fn->waiting = 0;
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (auto& o : n->outputs) o.ClearParts();  // what a failed Backward left
      for (const auto& e : n->inputs) {
        Node* p = e.producer.get();
        if (p == nullptr) continue;
        if (p->walk != walk) {
          p->walk = walk;
          p->waiting = 0;
          stack.push_back(p);
        }
        ++p->waiting;
      }
    }
  }

  // Gradient parts, in the order they were made (the fixed summation order
  // that makes the result the same bit for bit every run): on the producing
  // node's outputs, and here for leaves, by tensor id.
  std::unordered_map<uint64_t, std::vector<nabla::Tensor>> pending;
  {
    bool found = false;
    for (auto& o : root->grad_fn->outputs)
      if (o.id == root->id) {
        o.AddPart(seed);
        found = true;
      }
    NABLA_ENFORCE(found, kPreconditionNotMet, "eager: Backward from '", root->Name(),
                  "', which is not among the outputs of the call that produced it");
  }
  std::vector<const InputEdge*> leaves;  // leaves a traversed node feeds, first-seen order
  std::unordered_set<const TensorImpl*> leaf_seen;
  std::vector<nabla::Tensor> env;
  std::vector<Node*> traversed;

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  ready.push(root->grad_fn.get());
  while (!ready.empty()) {
    Node& node = *ready.top();
    ready.pop();
    NABLA_ENFORCE(!node.released, kPreconditionNotMet, "eager: Backward through ", NodeName(node),
                  " a second time: the first Backward freed its saved tensors; keep it with retain_graph (C++ "
                  "Backward(true), Python backward(retain_graph=True)) on the first Backward to run another");
    const GradTemplate& t = *node.tmpl;
    // Its output gradients are complete: every consumer has run.
    // Emptied, then sized: what the last node left is dropped without
    // copying an empty tensor into every entry.
    env.clear();
    env.resize(t.n_env);
    bool any = false;
    for (size_t j = 0; j < node.outputs.size(); ++j) {
      OutputInfo& o = node.outputs[j];
      if (o.n_parts == 0) {
        if (t.output_grad_read[j]) env[t.OutputGradIndex(j)] = Filled(o.shape.Get(), o.dtype, *o.device, 0.0);
        continue;
      }
      nabla::Tensor g;
      if (o.n_parts == 1) {
        g = std::move(o.first_part);
      } else {
        std::vector<nabla::Tensor> parts;
        parts.reserve(o.n_parts);
        parts.push_back(std::move(o.first_part));
        for (auto& p : o.more_parts) parts.push_back(std::move(p));
        g = SumInOrder(parts, *o.device);
      }
      o.ClearParts();
      if (auto out = o.tensor.lock(); out && out->retain_grad) Accumulate(*out, g, *o.device);
      env[t.OutputGradIndex(j)] = std::move(g);
      any = true;
    }
    // A node none of whose outputs got a gradient is a branch with no
    // gradient: skipped, its producers only counted down.
    if (any) {
      NABLA_ENFORCE(!t.no_grad_maker, kUnimplemented, "eager: Backward needs the gradient of ", NodeName(node),
                    ", but the op registers no GradOpDescMaker");
      for (const auto& s : node.saved) {
        const uint64_t now = s.version->load();
        if (now != s.saved_version) {
          auto live = s.tensor.lock();
          NABLA_THROW(kPreconditionNotMet, "eager: Backward: tensor '",
                      live ? live->Name() : (s.name.empty() ? "(unnamed)" : s.name), "' was changed in place after ",
                      NodeName(node), " saved it for its gradient (version ", now, ", saved at ", s.saved_version,
                      "); the gradient would be wrong. Change a copy, or change it before the call");
        }
        env[s.arg] = s.data;
      }
      Device& device = *(node.inputs.empty() ? node.outputs.front().device : node.inputs.front().device);
      for (const auto& g : t.ops) {
        try {
          g.call->RunEnv(env, g.in, g.out, device);
        } catch (const Error& e) {
          throw Error(e.kind(), StrCat("eager: Backward of ", NodeName(node), ": ", e.what()));
        }
      }
      // An input gradient the grad ops do not produce is zero: it adds no
      // part, so a producer none of whose outputs gets one is skipped, as
      // the static builder prunes grad ops whose gradient inputs are all zero.
      for (const auto& e : node.inputs) {
        auto add_parts = [&](int a) {
          for (int slot : t.input_grads[a]) {
            if (!env[slot].IsInitialized()) continue;
            if (e.producer) {
              e.producer->outputs[e.producer_output].AddPart(std::move(env[slot]));
            } else {
              pending[e.id].push_back(std::move(env[slot]));
            }
          }
        };
        add_parts(e.first_arg);
        for (int a : e.more_args) add_parts(a);
        if (e.leaf && leaf_seen.insert(e.leaf.get()).second) leaves.push_back(&e);
      }
    }
    for (const auto& e : node.inputs) {
      if (!e.producer) continue;
      if (--e.producer->waiting == 0) ready.push(e.producer.get());
    }
    traversed.push_back(&node);
  }
  for (const InputEdge* e : leaves) {
    auto it = pending.find(e->id);
    if (it != pending.end()) {
      Accumulate(*e->leaf, SumInOrder(it->second, *e->device), *e->device);
    } else if (!e->leaf->grad) {
      // A leaf the loss reads but gets no gradient from: zeros (the static builder's
      // fill_zeros_like), not "none", so Grad() is defined for it.
      e->leaf->grad =
          TensorImpl::Make(Filled(e->shape.Get(), e->dtype, *e->device, 0.0), e->leaf->Name() + kGradSuffix, false);
    }
  }
  // Freed only once Backward succeeded: a failed one leaves the graph as it was.
  if (!retain_graph)
    for (Node* n : traversed) {
      n->saved.clear();
      n->released = true;
    }
}

}  // namespace nabla::eager::detail
