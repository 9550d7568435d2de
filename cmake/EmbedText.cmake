# cmake -DIN=<file> -DOUT=<file.inc> -P EmbedText.cmake
# Writes IN as a C++ raw string literal, for `#include`-ing into an initializer.
file(READ ${IN} content)
file(WRITE ${OUT} "R\"sf_embed(${content})sf_embed\"\n")
