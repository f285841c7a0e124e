pseudonym {
  version = 0
  key "0" { secret = file("../secrets/no-such-secret.txt") }
}
