pseudonym {
  version = -2
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
}
