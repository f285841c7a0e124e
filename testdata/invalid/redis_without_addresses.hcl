limiter {
  backend = "redis"
  redis {
    addrs       = []
    tls_ca_file = "../secrets/fake-hmac-v1.txt"
  }
}

pseudonym {
  version = 1
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
}
