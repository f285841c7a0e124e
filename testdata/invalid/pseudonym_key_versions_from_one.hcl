pseudonym {
  version = 0
  key "0" { secret = file("../secrets/fake-hmac-v1.txt") }
  key "-3" { secret = file("../secrets/fake-hmac-v2.txt") }
  key "two" { secret = file("../secrets/fake-hmac-v2.txt") }
  key "2" { secret = file("../secrets/fake-short.txt") }
  key "2" { secret = file("../secrets/fake-hmac-v2.txt") }
}
