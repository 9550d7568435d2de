// Printable (common/text.h): what an echoed input becomes.
#include "common/text.h"

#include <gtest/gtest.h>

#include <string>

namespace stateflow {
namespace {

TEST(Printable, LeavesPlainTextAlone) {
  EXPECT_EQ(Printable("model.architecture: unknown 'foo' (a\\b)"),
            "model.architecture: unknown 'foo' (a\\b)");
  EXPECT_EQ(Printable(""), "");
}

TEST(Printable, EscapesControlCharacters) {
  EXPECT_EQ(Printable("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(Printable("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(Printable(std::string("nul\0end", 7)), "nul\\x00end");
  EXPECT_EQ(Printable("\x7f"), "\\x7f");
  EXPECT_EQ(Printable("x\n").find('\n'), std::string::npos);
}

TEST(Printable, KeepsUtf8AndEscapesBrokenBytes) {
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(Printable("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(Printable("\xc3"), "\\xc3");               // truncated
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");      // overlong '/'
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(Printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  // A C1 control character is valid UTF-8 but still a terminal control.
  EXPECT_EQ(Printable("\xc2\x9b[31m"), "\\xc2\\x9b[31m");
  EXPECT_EQ(Printable("\xc2\xa0"), "\xc2\xa0");  // no-break space: a character
}

}  // namespace
}  // namespace stateflow
