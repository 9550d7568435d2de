// Text that came from input, made safe to echo in a one-line message: a
// scenario string, a flag's value or a file name may hold a newline, a
// terminal escape sequence or bytes that are not UTF-8, and echoing them raw
// would break the "one line on stderr" promise or the user's terminal.
//
// Not a quoting scheme to read back, and not JSON escaping (protobuf's JSON
// printer does that for the outputs).
//
//   std::cerr << Printable("foo\n\x1b[31m");   // foo\n\x1b[31m (literally)
#pragma once

#include <string>
#include <string_view>

namespace stateflow {

// `text` with every control character (bytes 0x00-0x1f and 0x7f, and the C1
// controls U+0080-U+009F, which some terminals obey) written as an escape --
// \n, \r, \t, else \xNN per byte -- and every byte that does not belong to a
// well-formed UTF-8 sequence as \xNN. Printable ASCII (backslash
// included) and valid multi-byte UTF-8 characters stay as they are.
std::string Printable(std::string_view text);

// Whether `text` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, at most U+10FFFF); what protobuf's string fields must hold
// for their JSON and binary forms.
bool IsUtf8(std::string_view text);

// `v` as printf's %g writes it (six significant digits, no trailing zeros):
// 0.25, 1e+06, 3.14159. For numbers echoed in messages and labels.
std::string FormatG(double v);

}  // namespace stateflow
