policy "per-client" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1m"
}
subject {
  jwt {
    jwks_url             = "https://idp.example/.well-known/jwks.json"
    issuer               = "https://idp.example/"
    audience             = ["orders-api"]
    algorithms           = ["RS256"]
    max_token_bytes      = 0
    invalid_token_policy = "no-such-policy"
  }
}
