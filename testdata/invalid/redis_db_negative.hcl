limiter {
  backend = "redis"
  redis {
    addrs = ["127.0.0.1:6379"]
    db    = -1
  }
}

pseudonym {
  version = 1
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
}
