pseudonym {
  version = 0
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
}
