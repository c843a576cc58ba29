// lookup_table_v2 (Paddle's embedding op): lookup_table with Ids of any shape,
// Out = Ids.shape + [width]. Everything else is lookup_table's (lookup_table.h).
#include "lookup_table.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {

NABLA_REGISTER_OPS(lookup_table_v2) {
  GradCheckSpec repeated =
      CheckCase("repeated_ids_2d", {CheckInput("W", {5, 3}), IndexIn("Ids", {2, 3}, 5, {0, 4, 2, 4, 4, 1})});
  GradCheckSpec padded = CheckCase("padding_idx_1d", {CheckInput("W", {4, 2}), IndexIn("Ids", {5}, 4, {3, 1, 3, 0, 1})},
                                   {{"padding_idx", 3}});
  RegisterLookupTable(registrar, "lookup_table_v2", false, __FILE__, __LINE__)
      .Doc("Embedding lookup: Out[i...] = W[Ids[i...]] for Ids of any shape, zeros where Ids equals padding_idx.")
      .GradCheck(repeated)
      .GradCheck(padded);
}

}  // namespace nabla::nn
