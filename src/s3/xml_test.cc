#include "s3/xml.h"

#include <gtest/gtest.h>

namespace objectcache::s3 {
namespace {

TEST(XmlTest, ParsesDeleteObjectsBodies) {
  XmlElement root;
  std::string why;
  ASSERT_TRUE(ParseXml(R"(<?xml version="1.0" encoding="UTF-8"?>
<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>
  <Object><Key>a&amp;b &lt;c&gt; &#233;&#x4e2d;</Key></Object><!-- note -->
  <Object><Key>plain</Key><VersionId/></Object></Delete>)",
                       &root, &why))
      << why;
  EXPECT_EQ(root.name, "Delete");
  ASSERT_EQ(root.children.size(), 3u);
  EXPECT_EQ(root.Child("Quiet")->text, "true");
  EXPECT_EQ(root.children[1].Child("Key")->text, "a&b <c> \xc3\xa9\xe4\xb8\xad");
  EXPECT_EQ(root.children[2].Child("Key")->text, "plain");
}

TEST(XmlTest, RejectsHostileAndMalformedDocuments) {
  const std::string deep = std::string(100 * 3, ' ');
  std::string nested;
  for (int i = 0; i < 40; ++i) nested += "<a>";
  for (int i = 0; i < 40; ++i) nested += "</a>";
  for (const std::string& doc :
       {std::string(""), std::string("<a>"), std::string("<a></b>"), std::string("<a>&bogus;</a>"),
        std::string("<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>"),
        std::string("<a><!ENTITY x></a>"), std::string("<a>&#0;</a>"),
        std::string("<a></a><b></b>"), std::string("text"), nested,
        std::string("<a attr=\"unterminated></a>")}) {
    XmlElement root;
    std::string why;
    EXPECT_FALSE(ParseXml(doc, &root, &why)) << doc;
  }
}

TEST(XmlTest, ElementCountIsBounded) {
  // Regression: a 4 MiB body of tiny elements cost about 95 MB of tree.
  std::string doc = "<Delete>";
  for (size_t i = 0; i < kMaxXmlElements; ++i) doc += "<a/>";
  doc += "</Delete>";
  XmlElement root;
  std::string why;
  EXPECT_FALSE(ParseXml(doc, &root, &why));
  EXPECT_NE(why.find("too many elements"), std::string::npos) << why;
  EXPECT_TRUE(ParseXml("<a><b/><c/></a>", &root, &why, 3)) << why;
  EXPECT_FALSE(ParseXml("<a><b/><c/></a>", &root, &why, 2));
}

TEST(XmlTest, WriterEscapes) {
  XmlWriter w;
  w.Open("R", true);
  w.Element("Key", "<&>\"'");
  w.Close("R");
  std::string out = w.Finish();
  EXPECT_NE(out.find("<Key>&lt;&amp;&gt;&quot;&apos;</Key>"), std::string::npos);
  XmlElement back;
  std::string why;
  ASSERT_TRUE(ParseXml(out, &back, &why)) << why;
  EXPECT_EQ(back.Child("Key")->text, "<&>\"'");
}

}  // namespace
}  // namespace objectcache::s3
