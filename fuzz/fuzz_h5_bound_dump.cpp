// HDF5 reader fuzzer, raw bytes: the input is a dump that `ckv bound --dump FILE.h5` reads
// with the tiny model of tests/data (seeds are dumps made with it). Seeds are small real ckv outputs
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
  ckv::fuzz::read_with_bound_dump(h5);
  return 0;
}
