subject {
  jwt {
    jwks_url   = "https://idp.example/.well-known/jwks.json"
    issuer     = "https://idp.example/"
    audience   = []
    leeway     = "1h"
    algorithms = []
  }
}
