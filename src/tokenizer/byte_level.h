// GPT-2's reversible byte <-> printable character mapping (bytes_to_unicode) used by the
// ByteLevel pre-tokenizer and decoder, and the UTF-8 helpers decoding needs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::tokenizer {

// UTF-8 of the character byte `b` stands for in a ByteLevel vocabulary ("Ġ" for ' ').
const std::string& byte_to_token_char(uint8_t b);

// Maps every character of a vocabulary string back to its byte, as HF's ByteLevel decoder does;
// nullopt when some character is outside the mapping (HF then uses the string's own bytes).
std::optional<std::string> token_chars_to_bytes(std::string_view token);

// The ByteLevel-mapped form of raw bytes (the vocabulary spelling of a piece).
std::string bytes_to_token_chars(std::string_view bytes);

// Decodes as much of `bytes` as is already decided into valid UTF-8, replacing each maximal
// invalid subpart by U+FFFD (Rust's String::from_utf8_lossy, which HF's decoder uses). When
// `at_end` is false an incomplete but so far valid sequence at the end is left undecoded;
// returns how many bytes were consumed.
size_t append_utf8_lossy(std::string_view bytes, bool at_end, std::string& out);

}  // namespace tandem::tokenizer
