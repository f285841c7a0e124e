limiter {
  backend = "redis"
  redis {
    mode        = "cluster"
    addrs       = [":7000", "redis-a", "redis-b:7001", "redis-c:port"]
    tls         = false
    tls_ca_file = "../secrets/missing-ca.pem"
  }
}

pseudonym {
  version = 1
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
}
