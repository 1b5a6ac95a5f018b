module example.com/metalcore-consumer

go 1.26.8

require metalcore v0.0.0

require golang.org/x/sys v0.49.0 // indirect

replace metalcore => ../..
