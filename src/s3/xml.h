// The XML S3 speaks: a writer for responses and a small, strict reader for the request bodies
// S3 accepts (DeleteObjects, CompleteMultipartUpload, CreateBucketConfiguration).
//
// The reader takes elements, text and the five predefined entities; it rejects DTDs,
// processing instructions other than the declaration, unknown entities, unbalanced tags and
// documents nested deeper than 32 levels, so hostile bodies cannot expand or recurse.
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
bool ParseXml(std::string_view doc, XmlElement* root, std::string* error);

}  // namespace objectcache::s3
