#include "s3/aws_chunked.h"

#include <cctype>
#include <charconv>

namespace objectcache::s3 {
namespace {
constexpr size_t kMaxLine = 4096;
constexpr size_t kMaxTrailers = 16;

S3Error Bad(std::string why) { return MakeS3Error("IncompleteBody", "aws-chunked body: " + why); }
}  // namespace

AwsChunkedDecoder::AwsChunkedDecoder(std::optional<ChunkSignatureChain> chain,
                                     uint64_t decoded_length,
                                     std::optional<PayloadChecksum> trailer, bool signed_trailers)
    : chain_(std::move(chain)),
      decoded_length_(decoded_length),
      trailer_(std::move(trailer)),
      signed_trailers_(signed_trailers && chain_) {}

S3Result<void> AwsChunkedDecoder::TrailerLine() {
  // "name:value"; of the values, only the checksum the request announced is looked at.
  const size_t colon = line_.find(':');
  if (colon == std::string::npos) return std::unexpected(Bad("malformed trailer line"));
  std::string name = line_.substr(0, colon);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  std::string_view value = std::string_view(line_).substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  if (signed_trailers_) {
    // The signature comes last and once; each line before it is covered by it.
    if (trailer_signature_) return std::unexpected(Bad("a trailer after x-amz-trailer-signature"));
    if (name == "x-amz-trailer-signature") {
      trailer_signature_ = std::string(value);
      return {};
    }
    if (trailers_.size() == kMaxTrailers || !trailers_.emplace(name, value).second) {
      return std::unexpected(
          Bad("more than " + std::to_string(kMaxTrailers) + " trailers, or one named twice"));
    }
  }
  if (!trailer_ || name != trailer_->header()) return {};
  trailer_seen_ = true;
  if (value != trailer_->FinishBase64()) {
    return std::unexpected(MakeS3Error(
        "BadDigest", "The " + name + " you specified did not match the calculated checksum."));
  }
  trailer_value_ = std::string(value);
  return {};
}

std::optional<std::pair<std::string, std::string>> AwsChunkedDecoder::checksum() const {
  if (state_ != State::kDone || !trailer_ || !trailer_seen_) return std::nullopt;
  return std::pair(trailer_->header(), trailer_value_);
}

S3Result<void> AwsChunkedDecoder::EndTrailers() {
  if (trailer_ && !trailer_seen_) {
    return std::unexpected(Bad("the trailer " + trailer_->header() + " is missing"));
  }
  if (signed_trailers_) {
    std::string canonical;
    for (const auto& [name, value] : trailers_) canonical += name + ":" + value + "\n";
    if (!trailer_signature_ || !chain_->VerifyTrailer(canonical, *trailer_signature_)) {
      return std::unexpected(MakeS3Error(
          "SignatureDoesNotMatch",
          "the x-amz-trailer-signature of the streaming upload is missing or does not match"));
    }
  }
  state_ = State::kDone;
  return {};
}

S3Result<void> AwsChunkedDecoder::StartChunk() {
  // "hex-size[;chunk-signature=SIG]"
  std::string_view l = line_;
  size_t semi = l.find(';');
  std::string_view size_text = l.substr(0, semi);
  auto [end, ec] =
      std::from_chars(size_text.data(), size_text.data() + size_text.size(), chunk_size_, 16);
  if (ec != std::errc() || end != size_text.data() + size_text.size() || size_text.empty()) {
    return std::unexpected(Bad("bad chunk size '" + std::string(size_text.substr(0, 32)) + "'"));
  }
  chunk_signature_.clear();
  if (semi != std::string_view::npos) {
    std::string_view ext = l.substr(semi + 1);
    constexpr std::string_view kSig = "chunk-signature=";
    if (!ext.starts_with(kSig)) return std::unexpected(Bad("unknown chunk extension"));
    chunk_signature_ = std::string(ext.substr(kSig.size()));
  }
  if (chain_ && chunk_signature_.size() != 64) {
    return std::unexpected(MakeS3Error("SignatureDoesNotMatch", "chunk without a signature"));
  }
  if (chunk_size_ > decoded_length_ - decoded_) {
    return std::unexpected(Bad("chunks exceed x-amz-decoded-content-length"));
  }
  chunk_left_ = chunk_size_;
  line_.clear();
  if (chunk_size_ == 0) return EndChunk();
  state_ = State::kData;
  return {};
}

S3Result<void> AwsChunkedDecoder::EndChunk() {
  if (chain_ && !chain_->Verify(ToHex(chunk_sha_.Finish()), chunk_signature_)) {
    return std::unexpected(MakeS3Error("SignatureDoesNotMatch",
                                       "a chunk signature of the streaming upload does not match"));
  }
  if (chunk_size_ == 0) {
    if (decoded_ != decoded_length_) {
      return std::unexpected(Bad("body ends before x-amz-decoded-content-length"));
    }
    state_ = State::kTrailer;
  } else {
    state_ = State::kDataEnd;
  }
  return {};
}

S3Result<void> AwsChunkedDecoder::Feed(std::span<const std::byte> in, std::string* out) {
  const char* p = reinterpret_cast<const char*>(in.data());
  size_t n = in.size();
  while (n > 0) {
    switch (state_) {
      case State::kHeader:
      case State::kTrailer: {
        char c = *p++;
        --n;
        line_ += c;
        if (line_.size() > kMaxLine) return std::unexpected(Bad("chunk header too long"));
        if (!line_.ends_with("\r\n")) break;
        line_.resize(line_.size() - 2);
        if (state_ == State::kTrailer) {
          // Trailer lines (checksums) until an empty line.
          // With signed trailers, an empty line before any (as in AWS's own example) only
          // separates them from the final chunk.
          const bool separator = signed_trailers_ && trailers_.empty() && !trailer_signature_;
          if (line_.empty() && separator && !separator_seen_) {
            separator_seen_ = true;
          } else if (auto r = line_.empty() ? EndTrailers() : TrailerLine(); !r) {
            return r;
          }
          line_.clear();
          break;
        }
        if (auto r = StartChunk(); !r) return r;
        break;
      }
      case State::kData: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(n, chunk_left_));
        out->append(p, take);
        chunk_sha_.Update(std::string_view(p, take));
        if (trailer_) trailer_->Update(std::as_bytes(std::span(p, take)));
        p += take;
        n -= take;
        chunk_left_ -= take;
        decoded_ += take;
        if (chunk_left_ == 0) {
          if (auto r = EndChunk(); !r) return r;
        }
        break;
      }
      case State::kDataEnd: {
        line_ += *p++;
        --n;
        if (line_.size() == 2) {
          if (line_ != "\r\n") return std::unexpected(Bad("chunk data not followed by CRLF"));
          line_.clear();
          state_ = State::kHeader;
        }
        break;
      }
      case State::kDone:
        return std::unexpected(Bad("bytes after the final chunk"));
    }
  }
  return {};
}

S3Result<void> AwsChunkedDecoder::Finish() {
  // The signed form ends "0;chunk-signature=..\r\n\r\n": the trailer state sees the empty line.
  // AWS's own example of signed trailers ends at the signature's line, with no empty line.
  if (state_ == State::kTrailer && line_.empty() && trailer_signature_) return EndTrailers();
  if (state_ != State::kDone) return std::unexpected(Bad("body ends inside a chunk"));
  return {};
}

}  // namespace objectcache::s3
