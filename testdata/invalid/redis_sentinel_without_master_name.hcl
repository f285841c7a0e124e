limiter {
  backend = "redis"
  redis {
    mode  = "sentinel"
    addrs = ["127.0.0.1:26379"]
  }
}

pseudonym {
  version = 1
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
}
