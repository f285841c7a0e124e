listen {
  http  = ""
  https = ":8443"
}

tls {
  acme {
    domains    = ["api.example.com"]
    email      = "ops@example.com"
    challenges = ["http-01"]
  }
}
