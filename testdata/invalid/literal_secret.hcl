pseudonym {
  version = 1
  key "1" { secret = "test-only-fake-hmac-secret-0123456789abcdef" }
}
