#include "core/shard.h"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "core/error.h"

namespace ckv {
namespace {

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || ptr != end || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

int64_t Shard::size_of(int64_t total) const {
  if (total <= index) return 0;
  return (total - index + count - 1) / count;
}

std::string Shard::to_string() const { return fmt::format("{}/{}", index, count); }

Shard Shard::parse(std::string_view spec, std::string_view flag) {
  const size_t slash = spec.find('/');
  if (slash == std::string_view::npos)
    fail<UsageError>("{}: \"{}\" is not of the form i/N (e.g. 0/8)", flag, spec);
  const auto i = parse_int(spec.substr(0, slash));
  const auto n = parse_int(spec.substr(slash + 1));
  if (!i || !n) fail<UsageError>("{}: \"{}\" is not of the form i/N with integers i and N", flag, spec);
  if (*n < 1) fail<UsageError>("{}: \"{}\": the shard count N must be at least 1", flag, spec);
  if (*i < 0 || *i >= *n)
    fail<UsageError>("{}: \"{}\": the shard index must be in [0, {})", flag, spec, *n);
  return {*i, *n};
}

std::optional<Shard> Shard::from_env(const std::function<const char*(const char*)>& getenv) {
  auto read = [&](const char* name, std::optional<int64_t> fallback) -> int64_t {
    const char* v = getenv(name);
    if (v == nullptr || *v == '\0') {
      if (!fallback) fail<InputError>("{} is not set but SLURM_ARRAY_TASK_ID is", name);
      return *fallback;
    }
    const auto x = parse_int(v);
    if (!x) fail<InputError>("{}=\"{}\" is not an integer", name, v);
    return *x;
  };
  const char* id_text = getenv("SLURM_ARRAY_TASK_ID");
  if (id_text == nullptr || *id_text == '\0') return std::nullopt;
  const int64_t id = read("SLURM_ARRAY_TASK_ID", std::nullopt);
  const int64_t count = read("SLURM_ARRAY_TASK_COUNT", std::nullopt);
  const int64_t min = read("SLURM_ARRAY_TASK_MIN", 0);
  const int64_t step = read("SLURM_ARRAY_TASK_STEP", 1);
  if (count < 1) fail<InputError>("SLURM_ARRAY_TASK_COUNT={} must be at least 1", count);
  if (step < 1) fail<InputError>("SLURM_ARRAY_TASK_STEP={} must be at least 1", step);
  if (id < min || (id - min) % step != 0 || (id - min) / step >= count)
    fail<InputError>(
        "SLURM_ARRAY_TASK_ID={} is not one of the {} tasks from SLURM_ARRAY_TASK_MIN={} with step {} "
        "(give --shard i/N for arrays with gaps)",
        id, count, min, step);
  return Shard{(id - min) / step, count};
}

Shard Shard::resolve(std::string_view flag_value) {
  if (!flag_value.empty()) return parse(flag_value);
  if (auto s = from_env([](const char* name) { return std::getenv(name); })) return *s;
  return {};
}

}  // namespace ckv
