#include <fmt/core.h>
int main() { fmt::print("ckv\n"); return 0; }
