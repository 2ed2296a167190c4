// HDF5 reader fuzzer, raw bytes: the input is a shard that `ckv merge OUT FILE.h5` checks
// and copies (as the only shard). Seeds are small real ckv outputs
// (scripts/fuzz_corpus.sh). Byte mutation mostly exercises HDF5's own parsing;
// fuzz_h5_mutate reaches ckv's checks of attributes, shapes and missing objects.
#include <cstddef>
#include <cstdint>

#include "fuzz_h5_readers.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckv::fuzz::silence_stdout();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto h5 = ckv::fuzz::write_file("input.h5", data, size);
  ckv::fuzz::read_with_merge(h5);
  return 0;
}
