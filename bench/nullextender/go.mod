module dra-extender/bench/nullextender

go 1.26
