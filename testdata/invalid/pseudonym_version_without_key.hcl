pseudonym {
  version = 3
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
  key "2" { secret = file("../secrets/fake-hmac-v2.txt") }
}
