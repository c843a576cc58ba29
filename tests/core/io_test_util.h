#pragma once
// Helpers shared by the program-file tests.
#include <gtest/gtest.h>

#include <string>

#include "nabla/error.h"
#include "nabla/program.h"
#include "nabla/program_io.h"

namespace nabla::io_test {

// "LINE:COL" (1-based) of the nth occurrence of `needle` in `text`, computed
// independently of yaml-cpp so position tests check the loader's arithmetic.
inline std::string At(const std::string& text, const std::string& needle, int nth = 0) {
  size_t p = text.find(needle);
  for (int i = 0; i < nth && p != std::string::npos; ++i) p = text.find(needle, p + 1);
  EXPECT_NE(p, std::string::npos) << "test bug: '" << needle << "' not in the text";
  int line = 1, col = 1;
  for (size_t i = 0; i < p; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// The error ParseProgram throws for `text` read as "f.yaml".
inline Error ParseError(const std::string& text) {
  try {
    ParseProgram(text, "f.yaml");
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return Error(ErrorKind::kRuntime, "no error");
}

inline bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Same blocks, vars (every field but the declared flag and positions), ops
// (slots, args, attrs) and backward info.
inline void ExpectSameProgram(const ProgramDesc& a, const ProgramDesc& b) {
  ASSERT_EQ(a.Size(), b.Size());
  for (size_t i = 0; i < a.Size(); ++i) {
    const BlockDesc& x = *a.Block(i);
    const BlockDesc& y = *b.Block(i);
    EXPECT_EQ(x.Idx(), y.Idx());
    EXPECT_EQ(x.ParentIdx(), y.ParentIdx());
    ASSERT_EQ(x.AllVars().size(), y.AllVars().size()) << "block " << i;
    for (const auto& v : x.AllVars()) {
      const VarDesc* w = y.FindVar(v->Name());
      ASSERT_NE(w, nullptr) << v->Name();
      EXPECT_EQ(v->GetShape(), w->GetShape()) << v->Name();
      EXPECT_EQ(v->HasDType(), w->HasDType()) << v->Name();
      if (v->HasDType()) {
        EXPECT_EQ(v->GetDType(), w->GetDType()) << v->Name();
      }
      EXPECT_EQ(v->Type(), w->Type()) << v->Name();
      EXPECT_EQ(v->Persistable(), w->Persistable()) << v->Name();
      EXPECT_EQ(v->StopGradient(), w->StopGradient()) << v->Name();
      ASSERT_EQ(v->Init().has_value(), w->Init().has_value()) << v->Name();
      if (v->Init()) {
        EXPECT_EQ(v->Init()->type, w->Init()->type);
        EXPECT_EQ(v->Init()->attrs, w->Init()->attrs);
      }
    }
    ASSERT_EQ(x.OpSize(), y.OpSize()) << "block " << i;
    for (size_t j = 0; j < x.OpSize(); ++j) {
      EXPECT_EQ(x.Op(j)->Type(), y.Op(j)->Type());
      EXPECT_EQ(x.Op(j)->Inputs(), y.Op(j)->Inputs());
      EXPECT_EQ(x.Op(j)->Outputs(), y.Op(j)->Outputs());
      EXPECT_EQ(x.Op(j)->Attrs(), y.Op(j)->Attrs()) << x.Op(j)->Type();
    }
  }
  ASSERT_EQ(a.Backward().has_value(), b.Backward().has_value());
  if (a.Backward()) {
    EXPECT_EQ(a.Backward()->loss, b.Backward()->loss);
    EXPECT_EQ(a.Backward()->param_grads, b.Backward()->param_grads);
  }
}

}  // namespace nabla::io_test
