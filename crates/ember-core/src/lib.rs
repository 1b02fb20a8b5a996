//! placeholder until filled
