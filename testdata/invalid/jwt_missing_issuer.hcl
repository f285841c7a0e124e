subject {
  jwt {
    jwks_url   = "https://idp.example/.well-known/jwks.json"
    algorithms = ["ES256"]
  }
}
