pseudonym {
  version = 3
  key "1" { secret = file("../secrets/fake-hmac-v1.txt") }
  key "3" { secret = file("../secrets/no-such-secret.txt") }
}
