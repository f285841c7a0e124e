pseudonym {
  version = 1
  key "1" { secret = file("../secrets/fake-short.txt") }
}
