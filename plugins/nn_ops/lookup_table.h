#pragma once
// lookup_table's schema, shape inference, grad maker and kernels, which
// lookup_table_v2 (Ids without the trailing 1) shares.
#include <string>

#include "nabla/plugin.h"

namespace nabla::nn {

// Registers `type` (W, Ids -> Out, attribute padding_idx), `type`_grad and
// their float kernels. ids_trailing_one: Ids is [..., 1] (lookup_table)
// rather than any shape (lookup_table_v2). The caller adds Doc and GradCheck.
OpBuilder& RegisterLookupTable(Registrar& registrar, const std::string& type, bool ids_trailing_one, const char* file,
                               int line);

}  // namespace nabla::nn
