policy "failed-logins" {
  algorithm      = "fixed-window"
  limit          = 5
  window         = "15m"
  count_statuses = [401]
}
subject {
  jwt {
    jwks_url             = "https://idp.example/.well-known/jwks.json"
    issuer               = "https://idp.example/"
    audience             = ["orders-api"]
    algorithms           = ["RS256"]
    invalid_token_policy = "failed-logins"
  }
}
