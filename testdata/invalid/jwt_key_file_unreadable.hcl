subject {
  jwt {
    jwks_file  = "../secrets/no-such-jwks.json"
    issuer     = "https://issuer.example.com/"
    audience   = []
    algorithms = ["RS256"]
  }
}
