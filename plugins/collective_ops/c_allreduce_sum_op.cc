// c_allreduce_sum: Out = the sum of X over every rank (Paddle's collective
// op; ring 0 is the MPI world). Several X vars are one fused allreduce.
#include "collective_util.h"

namespace nabla::collective {
namespace {

void AllreduceKernel(const ExecutionContext& ctx) {
  const std::string what = Describe(ctx);
  const double timeout = ctx.Attr<float>("timeout_s");
  OverBucket(ctx, [&](void* buf, int64_t count, DType dtype) {
    Communicator::World().Allreduce(buf, buf, count, dtype, timeout, what);
  });
}

NABLA_REGISTER_OPS(c_allreduce_sum) {
  CommonSchema(registrar.Op("c_allreduce_sum", __FILE__, __LINE__)
                   .Doc("Out = the elementwise sum of X over all ranks of the MPI world (data-parallel gradients). "
                        "Ranks must run their collectives in one order; executors keep them in program order."));
  opkit::RegisterKernelForDTypes(registrar, "c_allreduce_sum", opkit::kNumericDTypes, AllreduceKernel, __FILE__,
                                 __LINE__);
}

}  // namespace
}  // namespace nabla::collective
