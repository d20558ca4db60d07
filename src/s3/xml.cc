#include "s3/xml.h"

#include <charconv>
#include <cstdint>

namespace objectcache::s3 {

XmlWriter::XmlWriter() { out_ = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"; }

void XmlWriter::Open(std::string_view name, bool s3_namespace) {
  out_ += '<';
  out_ += name;
  if (s3_namespace) out_ += " xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";
  out_ += '>';
}

void XmlWriter::OpenWithAttributes(std::string_view name, std::string_view attributes) {
  out_ += '<';
  out_ += name;
  out_ += ' ';
  out_ += attributes;
  out_ += '>';
}

void XmlWriter::Close(std::string_view name) {
  out_ += "</";
  out_ += name;
  out_ += '>';
}

void XmlWriter::Element(std::string_view name, std::string_view text) {
  Open(name);
  out_ += XmlEscape(text);
  Close(name);
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\r':
        out += "&#13;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

const XmlElement* XmlElement::Child(std::string_view child_name) const {
  for (const XmlElement& c : children) {
    if (c.name == child_name) return &c;
  }
  return nullptr;
}

namespace {

class Parser {
 public:
  Parser(std::string_view doc, size_t max_elements) : s_(doc), elements_left_(max_elements) {}

  bool Parse(XmlElement* root, std::string* error) {
    SkipSpace();
    if (s_.substr(i_).starts_with("<?xml")) {
      size_t end = s_.find("?>", i_);
      if (end == std::string_view::npos) return Fail("unterminated declaration", error);
      i_ = end + 2;
    }
    SkipMisc();
    if (!Element(root, 0, error)) return false;
    SkipMisc();
    if (i_ != s_.size()) return Fail("content after the root element", error);
    return true;
  }

 private:
  bool Fail(const char* why, std::string* error) {
    *error = std::string(why) + " at byte " + std::to_string(i_);
    return false;
  }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  void SkipMisc() {
    for (;;) {
      SkipSpace();
      if (s_.substr(i_).starts_with("<!--")) {
        size_t end = s_.find("-->", i_ + 4);
        if (end == std::string_view::npos) return;
        i_ = end + 3;
      } else {
        return;
      }
    }
  }
  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
  }
  bool Name(std::string* out) {
    size_t start = i_;
    while (i_ < s_.size() && NameChar(s_[i_])) ++i_;
    if (i_ == start) return false;
    *out = std::string(s_.substr(start, i_ - start));
    return true;
  }
  bool Text(std::string* out, std::string* error) {
    while (i_ < s_.size() && s_[i_] != '<') {
      if (s_[i_] == '&') {
        size_t semi = s_.find(';', i_);
        if (semi == std::string_view::npos || semi - i_ > 10) return Fail("bad entity", error);
        std::string_view ent = s_.substr(i_ + 1, semi - i_ - 1);
        if (ent == "lt")
          *out += '<';
        else if (ent == "gt")
          *out += '>';
        else if (ent == "amp")
          *out += '&';
        else if (ent == "quot")
          *out += '"';
        else if (ent == "apos")
          *out += '\'';
        else if (ent.starts_with("#")) {
          uint32_t cp = 0;
          const bool hex = ent.starts_with("#x");
          std::string_view digits = ent.substr(hex ? 2 : 1);
          auto [end, ec] =
              std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
          if (ec != std::errc() || end != digits.data() + digits.size() || cp == 0 ||
              cp > 0x10ffff) {
            return Fail("bad character reference", error);
          }
          AppendUtf8(static_cast<uint32_t>(cp), out);
        } else {
          return Fail("unknown entity", error);
        }
        i_ = semi + 1;
      } else {
        *out += s_[i_++];
      }
    }
    return true;
  }
  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xc0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xe0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      *out += static_cast<char>(0xf0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  // At '<' of a start tag.
  bool Element(XmlElement* e, int depth, std::string* error) {
    if (depth > 32) return Fail("nested too deeply", error);
    if (elements_left_ == 0) return Fail("too many elements", error);
    --elements_left_;
    if (i_ >= s_.size() || s_[i_] != '<') return Fail("expected an element", error);
    ++i_;
    if (!Name(&e->name)) return Fail("bad element name", error);
    // Attributes (xmlns and the like) are skipped, respecting quotes.
    while (i_ < s_.size() && s_[i_] != '>' && s_[i_] != '/') {
      if (s_[i_] == '"' || s_[i_] == '\'') {
        size_t end = s_.find(s_[i_], i_ + 1);
        if (end == std::string_view::npos) return Fail("unterminated attribute", error);
        i_ = end + 1;
      } else if (s_[i_] == '<') {
        return Fail("bad start tag", error);
      } else {
        ++i_;
      }
    }
    if (i_ >= s_.size()) return Fail("unterminated start tag", error);
    if (s_[i_] == '/') {
      if (i_ + 1 >= s_.size() || s_[i_ + 1] != '>') return Fail("bad empty tag", error);
      i_ += 2;
      return true;
    }
    ++i_;
    for (;;) {
      if (!Text(&e->text, error)) return false;
      if (i_ >= s_.size()) return Fail("unterminated element", error);
      if (s_.substr(i_).starts_with("</")) {
        i_ += 2;
        std::string name;
        if (!Name(&name) || name != e->name) return Fail("mismatched end tag", error);
        SkipSpace();
        if (i_ >= s_.size() || s_[i_] != '>') return Fail("bad end tag", error);
        ++i_;
        return true;
      }
      if (s_.substr(i_).starts_with("<!--")) {
        size_t end = s_.find("-->", i_ + 4);
        if (end == std::string_view::npos) return Fail("unterminated comment", error);
        i_ = end + 3;
        continue;
      }
      if (s_.substr(i_).starts_with("<!") || s_.substr(i_).starts_with("<?")) {
        return Fail("declarations are not accepted", error);
      }
      e->children.emplace_back();
      if (!Element(&e->children.back(), depth + 1, error)) return false;
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  size_t elements_left_;
};

}  // namespace

bool ParseXml(std::string_view doc, XmlElement* root, std::string* error, size_t max_elements) {
  *root = XmlElement();
  return Parser(doc, max_elements).Parse(root, error);
}

}  // namespace objectcache::s3
