// The XML S3 speaks: a writer for responses and a small, strict reader for the request bodies
// S3 accepts (DeleteObjects, CompleteMultipartUpload, CreateBucketConfiguration).
//
// The reader takes elements, text and the five predefined entities; it rejects DTDs,
// processing instructions other than the declaration, unknown entities, unbalanced tags and
// documents nested deeper than 32 levels or holding more than `max_elements` elements, so
// hostile bodies cannot expand or recurse, and the tree built is bounded by the element count.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace objectcache::s3 {

class XmlWriter {
 public:
  XmlWriter();
  // Opens <name> (with the S3 namespace when `s3_namespace`).
  void Open(std::string_view name, bool s3_namespace = false);
  // Opens <name attributes>; `attributes` is written as given (constant text only).
  void OpenWithAttributes(std::string_view name, std::string_view attributes);
  void Close(std::string_view name);
  void Element(std::string_view name, std::string_view text);
  std::string Finish() { return std::move(out_); }

 private:
  std::string out_;
};

std::string XmlEscape(std::string_view text);

struct XmlElement {
  std::string name;
  std::string text;  // concatenated character data directly inside this element
  std::vector<XmlElement> children;

  // The first child of that name, or nullptr.
  const XmlElement* Child(std::string_view child_name) const;
};

// Parses a document into its root element; false (and a reason) on malformed input.
// The default bound fits the largest body S3 defines (CompleteMultipartUpload: 10,000 parts of
// three elements each).
inline constexpr size_t kMaxXmlElements = 32768;
bool ParseXml(std::string_view doc, XmlElement* root, std::string* error,
              size_t max_elements = kMaxXmlElements);

}  // namespace objectcache::s3
