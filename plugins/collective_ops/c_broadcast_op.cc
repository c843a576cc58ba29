// c_broadcast: Out = rank `root`'s X on every rank (Paddle's collective op;
// ring 0 is the MPI world). Several X vars are one fused broadcast.
#include "collective_util.h"

namespace nabla::collective {
namespace {

void BroadcastKernel(const ExecutionContext& ctx) {
  const std::string what = Describe(ctx);
  const double timeout = ctx.Attr<float>("timeout_s");
  const int root = ctx.Attr<int>("root");
  OverBucket(ctx, [&](void* buf, int64_t count, DType dtype) {
    Communicator::World().Broadcast(buf, count, dtype, root, timeout, what);
  });
}

NABLA_REGISTER_OPS(c_broadcast) {
  CommonSchema(registrar.Op("c_broadcast", __FILE__, __LINE__)
                   .Doc("Out = X of rank `root` on every rank of the MPI world (parameters at the start of a "
                        "data-parallel run)."))
      .Attr<int>("root", 0, "(int, default 0) the rank whose X every rank receives", [](const int& r) {
        NABLA_ENFORCE(r >= 0, kInvalidArgument, "root must be a rank (>= 0), but received ", r);
      });
  opkit::RegisterKernelForDTypes(registrar, "c_broadcast", opkit::kNumericDTypes, BroadcastKernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::collective
