#include "wire/bounded_json.h"

namespace objectcache::wire {
namespace {

// Counts without storing; returning false stops the parse at once.
class BoundsCheck {
 public:
  using json = nlohmann::json;
  explicit BoundsCheck(const JsonBounds& b) : bounds_(b) {}

  bool null() { return Value(); }
  bool boolean(bool) { return Value(); }
  bool number_integer(json::number_integer_t) { return Value(); }
  bool number_unsigned(json::number_unsigned_t) { return Value(); }
  bool number_float(json::number_float_t, const json::string_t&) { return Value(); }
  bool string(json::string_t&) { return Value(); }
  bool binary(json::binary_t&) { return Value(); }
  bool key(json::string_t&) { return Value(); }
  bool start_object(std::size_t) { return Open(); }
  bool start_array(std::size_t) { return Open(); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    why = "not valid JSON";
    return false;
  }

  std::string why;

 private:
  bool Value() {
    if (++values_ <= bounds_.max_values) return true;
    why = "more than " + std::to_string(bounds_.max_values) + " values";
    return false;
  }
  bool Open() {
    if (++depth_ > bounds_.max_depth) {
      why = "nested deeper than " + std::to_string(bounds_.max_depth);
      return false;
    }
    return Value();
  }
  bool Close() {
    --depth_;
    return true;
  }

  const JsonBounds bounds_;
  size_t depth_ = 0;
  size_t values_ = 0;
};

}  // namespace

nlohmann::json ParseBoundedJson(std::string_view text, const JsonBounds& bounds, std::string* why) {
  BoundsCheck check(bounds);
  if (!nlohmann::json::sax_parse(text, &check, nlohmann::json::input_format_t::json,
                                 /*strict=*/true, /*ignore_comments=*/false)) {
    if (why != nullptr) *why = check.why.empty() ? "not valid JSON" : check.why;
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace objectcache::wire
