// The tape's grad nodes: recording a call with its GradOpDescMaker's grad ops,
// and Backward over them.
#include <algorithm>
#include <queue>
#include <set>
#include <unordered_set>

#include "eager_internal.h"
#include "nabla/device.h"

namespace nabla::eager::detail {

namespace {
std::atomic<uint64_t> g_next_seq{0};

std::string NodeName(const Node& n) { return StrCat("op '", n.fwd.Type(), "' (call #", n.seq, ")"); }
}  // namespace

std::vector<TapeImpl*>& ActiveTapes() {
  thread_local std::vector<TapeImpl*> tapes;
  return tapes;
}

void Record(const OpDesc& fwd, const OpInfo& info, const std::vector<const Tensor*>& in_tensors,
            const std::vector<std::shared_ptr<TensorImpl>>& outputs) {
  auto node = std::make_shared<Node>();
  node->seq = g_next_seq.fetch_add(1);
  node->fwd = fwd;

  std::unordered_map<std::string, std::shared_ptr<TensorImpl>> fwd_vars;  // every forward arg -> its tensor
  std::unordered_set<std::string> no_grad;
  size_t k = 0;
  for (const auto& [slot, args] : fwd.Inputs()) {
    for (const auto& a : args) {
      const TensorImpl& t = *TensorImpl::Of(*in_tensors[k++]);
      fwd_vars.emplace(a, TensorImpl::Of(*in_tensors[k - 1]));
      if (!t.requires_grad) {
        no_grad.insert(a);
        continue;
      }
      bool seen = std::any_of(node->inputs.begin(), node->inputs.end(), [&](const InputEdge& e) { return e.var == a; });
      if (seen) continue;
      InputEdge e;
      e.var = a;
      e.name = t.name;
      e.shape = t.data.GetShape();
      e.dtype = t.data.GetDType();
      e.device = t.data.GetDevice();
      if (t.grad_fn) {
        e.producer = t.grad_fn;
      } else {
        e.leaf = TensorImpl::Of(*in_tensors[k - 1]);
      }
      node->inputs.push_back(std::move(e));
    }
  }
  k = 0;
  for (const auto& [slot, args] : fwd.Outputs()) {
    for (const auto& a : args) {
      const auto& t = outputs[k++];
      fwd_vars.emplace(a, t);
      if (!t->requires_grad) no_grad.insert(a);
      node->outputs.push_back(
          OutputInfo{a, t->name, t->data.GetShape(), t->data.GetDType(), t->data.GetDevice(), std::weak_ptr(t)});
    }
  }
  if (info.grad_maker) {
    node->grad_ops = info.grad_maker(node->fwd, no_grad, nullptr, {});
  } else {
    node->no_grad_maker = true;
  }
  // Save exactly what the grad ops read of the forward call, as Paddle's
  // dygraph does: the buffers, not the tensors, with their versions.
  std::set<std::string> read;
  for (const auto& g : node->grad_ops)
    for (const auto& [slot, args] : g->Inputs())
      for (const auto& a : args)
        if (fwd_vars.count(a)) read.insert(a);
  for (const auto& a : read) {
    const auto& t = fwd_vars.at(a);
    node->saved.push_back(SavedVar{a, t->name, t->data, t->version, t->version->load(), t});
  }
  for (const auto& t : outputs)
    if (t->requires_grad) t->grad_fn = node;

  for (TapeImpl* tape : ActiveTapes()) {
    if (!tape->recording) continue;
    TapeEntry entry;
    entry.node = node;
    for (const Tensor* t : in_tensors) entry.inputs.push_back(*t);
    for (const auto& t : outputs) entry.outputs.push_back(TensorImpl::Wrap(t));
    tape->entries.push_back(std::move(entry));
  }
}

namespace {

void Accumulate(TensorImpl& target, const nabla::Tensor& grad, Device& device) {
  if (!target.grad) {
    target.grad = TensorImpl::Make(grad, target.name + kGradSuffix, false);
    return;
  }
  target.grad->data = SumInOrder({target.grad->data, grad}, device);
  target.grad->version->fetch_add(1);
}

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }
};

}  // namespace

void RunBackward(const std::shared_ptr<TensorImpl>& root, bool retain_graph) {
  NABLA_ENFORCE(root->requires_grad, kPreconditionNotMet, "eager: Backward from '", root->name,
                "', which does not require grad: no input of the calls that made it requires grad, or they ran "
                "under NoGradGuard");
  NABLA_ENFORCE(root->data.Numel() == 1, kInvalidArgument, "eager: Backward from '", root->name, "' of shape ",
                ShapeToString(root->data.GetShape()),
                ": the loss must hold exactly one element (reduce it first, e.g. with mean)");
  Device& root_device = *root->data.GetDevice();
  nabla::Tensor seed = Filled(root->data.GetShape(), root->data.GetDType(), root_device, 1.0);
  if (!root->grad_fn) {
    Accumulate(*root, seed, root_device);
    return;
  }

  // Dependency counts: how many reachable consumers each node still waits for.
  std::unordered_map<Node*, int> deps;
  {
    std::vector<Node*> stack{root->grad_fn.get()};
    std::unordered_set<Node*> seen{root->grad_fn.get()};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const auto& e : n->inputs) {
        if (!e.producer) continue;
        ++deps[e.producer.get()];
        if (seen.insert(e.producer.get()).second) stack.push_back(e.producer.get());
      }
    }
  }

  // Gradient contributions per var, in the order they were made (the fixed
  // summation order that makes the result the same bit for bit every run).
  std::unordered_map<std::string, std::vector<nabla::Tensor>> pending;
  pending[root->var].push_back(seed);
  std::vector<std::pair<std::shared_ptr<TensorImpl>, Device*>> leaves;  // first-contribution order
  std::unordered_set<const TensorImpl*> leaf_seen;

  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  ready.push(root->grad_fn.get());
  while (!ready.empty()) {
    Node& node = *ready.top();
    ready.pop();
    NABLA_ENFORCE(!node.released, kPreconditionNotMet, "eager: Backward through ", NodeName(node),
                  " a second time: the first Backward freed its saved tensors; pass retain_graph=true to the first "
                  "Backward to run another");

    // Its output gradients are complete: every consumer has run.
    std::unordered_map<std::string, nabla::Tensor> env;
    std::vector<const OutputInfo*> missing;
    bool any = false;
    for (const auto& o : node.outputs) {
      auto it = pending.find(o.var);
      if (it == pending.end()) {
        missing.push_back(&o);
        continue;
      }
      nabla::Tensor g = SumInOrder(it->second, *o.device);
      pending.erase(it);
      if (auto t = o.tensor.lock(); t && t->retain_grad) Accumulate(*t, g, *o.device);
      env[GradVarName(o.var)] = std::move(g);
      any = true;
    }
    if (any) {
      NABLA_ENFORCE(!node.no_grad_maker, kUnimplemented, "eager: Backward needs the gradient of ", NodeName(node),
                    ", but the op registers no GradOpDescMaker");
      for (const auto& s : node.saved) {
        uint64_t now = s.version->load();
        auto live = s.tensor.lock();
        NABLA_ENFORCE(now == s.saved_version, kPreconditionNotMet, "eager: Backward: tensor '",
                      live ? live->name : s.name, "' was changed in place after ", NodeName(node),
                      " saved it for its gradient (version ", now, ", saved at ", s.saved_version,
                      "); the gradient would be wrong. Change a copy, or change it before the call");
        env[s.var] = s.data;
      }
      for (const OutputInfo* o : missing) env[GradVarName(o->var)] = Filled(o->shape, o->dtype, *o->device, 0.0);

      // An input used in several slots gets one gradient per write (mul(x, x)):
      // each write is renamed so every contribution is kept and summed.
      std::unordered_map<std::string, int> writes;
      for (const auto& g : node.grad_ops)
        for (const auto& [slot, args] : g->Outputs())
          for (const auto& a : args) ++writes[a];
      std::unordered_map<std::string, std::vector<std::string>> parts;  // input grad -> names written
      Device& device = node.inputs.empty() ? *node.outputs.front().device : *node.inputs.front().device;
      for (const auto& g : node.grad_ops) {
        const OpDesc* op = g.get();
        OpDesc renamed;
        for (const auto& [slot, args] : g->Outputs())
          for (const auto& a : args)
            if (a != kEmptyVarName && writes[a] > 1) {
              if (op == g.get()) renamed = *g, op = &renamed;
              auto& list = parts[a];
              std::string to = StrCat(a, kRenameInfix, list.size());
              auto& out_args = renamed.MutableOutputs()[slot];
              std::replace(out_args.begin(), out_args.end(), a, to);
              list.push_back(to);
            }
        try {
          RunByName(*op, env, device);
        } catch (const Error& e) {
          throw Error(e.kind(), StrCat("eager: Backward of ", NodeName(node), ": ", e.what()));
        }
      }
      for (const auto& e : node.inputs) {
        std::string g = GradVarName(e.var);
        std::vector<std::string> names = parts.count(g) ? parts[g] : std::vector<std::string>{g};
        auto& dst = pending[e.var];
        bool got = false;
        for (const auto& n : names) {
          auto it = env.find(n);
          if (it == env.end() || !it->second.IsInitialized()) continue;
          dst.push_back(it->second);
          got = true;
        }
        // A gradient the grad ops do not produce is zero (SPEC §1's fill_zeros_like).
        if (!got) dst.push_back(Filled(e.shape, e.dtype, *e.device, 0.0));
        if (e.leaf && leaf_seen.insert(e.leaf.get()).second) leaves.emplace_back(e.leaf, e.device);
      }
    }
    // A node none of whose outputs got a gradient is a branch with no
    // gradient: skipped, its producers only counted down.
    for (const auto& e : node.inputs) {
      if (!e.producer) continue;
      if (--deps[e.producer.get()] == 0) ready.push(e.producer.get());
    }
    if (!retain_graph) {
      node.saved.clear();
      node.saved.shrink_to_fit();
      node.released = true;
    }
  }
  for (auto& [leaf, device] : leaves) {
    auto it = pending.find(leaf->var);
    if (it == pending.end()) continue;
    Accumulate(*leaf, SumInOrder(it->second, *device), *device);
  }
}

}  // namespace nabla::eager::detail
