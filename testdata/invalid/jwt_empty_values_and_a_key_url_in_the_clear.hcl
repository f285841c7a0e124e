subject {
  jwt {
    jwks_url   = "http://keys.example.com/jwks.json"
    issuer     = " "
    audience   = ["orders", ""]
    algorithms = []
    leeway     = "-1s"
  }
}

route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:9000"
  subject  = ["jwt"]
}
