set terminal pngcairo size 1200,942 font ',10' noenhanced
set key below
set grid
set logscale x 2
set xlabel 'sequence length (keys)'
set output 'benchmarks/results/default/default-throughput.png'
set ylabel 'GFLOP/s'
set title 'throughput (AMD EPYC, 2 threads; FMA peak 530 GFLOP/s)'
set arrow from graph 0, first 530.033 to graph 1, first 530.033 nohead dt 2
plot 'benchmarks/results/default/default.dat' index 0 using 1:2 with linespoints title 'cpu bwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 1 using 1:2 with linespoints title 'cpu bwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 2 using 1:2 with linespoints title 'cpu bwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 3 using 1:2 with linespoints title 'cpu bwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 4 using 1:2 with linespoints title 'cpu bwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 5 using 1:2 with linespoints title 'cpu bwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 6 using 1:2 with linespoints title 'cpu bwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 7 using 1:2 with linespoints title 'cpu fwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 8 using 1:2 with linespoints title 'cpu fwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 9 using 1:2 with linespoints title 'cpu fwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 10 using 1:2 with linespoints title 'cpu fwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 11 using 1:2 with linespoints title 'cpu fwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 12 using 1:2 with linespoints title 'cpu fwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 13 using 1:2 with linespoints title 'cpu fwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 14 using 1:2 with linespoints title 'reference bwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 15 using 1:2 with linespoints title 'reference bwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 16 using 1:2 with linespoints title 'reference bwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 17 using 1:2 with linespoints title 'reference bwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 18 using 1:2 with linespoints title 'reference bwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 19 using 1:2 with linespoints title 'reference fwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 20 using 1:2 with linespoints title 'reference fwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 21 using 1:2 with linespoints title 'reference fwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 22 using 1:2 with linespoints title 'reference fwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 23 using 1:2 with linespoints title 'reference fwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 24 using 1:2 with linespoints title 'standard bwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 25 using 1:2 with linespoints title 'standard bwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 26 using 1:2 with linespoints title 'standard bwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 27 using 1:2 with linespoints title 'standard bwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 28 using 1:2 with linespoints title 'standard bwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 29 using 1:2 with linespoints title 'standard bwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 30 using 1:2 with linespoints title 'standard bwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 31 using 1:2 with linespoints title 'standard fwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 32 using 1:2 with linespoints title 'standard fwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 33 using 1:2 with linespoints title 'standard fwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 34 using 1:2 with linespoints title 'standard fwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 35 using 1:2 with linespoints title 'standard fwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 36 using 1:2 with linespoints title 'standard fwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 37 using 1:2 with linespoints title 'standard fwd f32 d=64'
unset arrow
set output 'benchmarks/results/default/default-memory.png'
set logscale y 2
set format y '%.0b %BB'
set ylabel 'extra memory (bytes)'
set title 'memory beyond inputs and outputs'
plot 'benchmarks/results/default/default.dat' index 0 using 1:3 with linespoints title 'cpu bwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 1 using 1:3 with linespoints title 'cpu bwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 2 using 1:3 with linespoints title 'cpu bwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 3 using 1:3 with linespoints title 'cpu bwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 4 using 1:3 with linespoints title 'cpu bwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 5 using 1:3 with linespoints title 'cpu bwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 6 using 1:3 with linespoints title 'cpu bwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 7 using 1:3 with linespoints title 'cpu fwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 8 using 1:3 with linespoints title 'cpu fwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 9 using 1:3 with linespoints title 'cpu fwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 10 using 1:3 with linespoints title 'cpu fwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 11 using 1:3 with linespoints title 'cpu fwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 12 using 1:3 with linespoints title 'cpu fwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 13 using 1:3 with linespoints title 'cpu fwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 14 using 1:3 with linespoints title 'reference bwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 15 using 1:3 with linespoints title 'reference bwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 16 using 1:3 with linespoints title 'reference bwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 17 using 1:3 with linespoints title 'reference bwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 18 using 1:3 with linespoints title 'reference bwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 19 using 1:3 with linespoints title 'reference fwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 20 using 1:3 with linespoints title 'reference fwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 21 using 1:3 with linespoints title 'reference fwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 22 using 1:3 with linespoints title 'reference fwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 23 using 1:3 with linespoints title 'reference fwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 24 using 1:3 with linespoints title 'standard bwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 25 using 1:3 with linespoints title 'standard bwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 26 using 1:3 with linespoints title 'standard bwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 27 using 1:3 with linespoints title 'standard bwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 28 using 1:3 with linespoints title 'standard bwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 29 using 1:3 with linespoints title 'standard bwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 30 using 1:3 with linespoints title 'standard bwd f32 d=64', \
     'benchmarks/results/default/default.dat' index 31 using 1:3 with linespoints title 'standard fwd bf16 causal d=64', \
     'benchmarks/results/default/default.dat' index 32 using 1:3 with linespoints title 'standard fwd bf16 d=64', \
     'benchmarks/results/default/default.dat' index 33 using 1:3 with linespoints title 'standard fwd f16 causal d=128', \
     'benchmarks/results/default/default.dat' index 34 using 1:3 with linespoints title 'standard fwd f32 causal d=128', \
     'benchmarks/results/default/default.dat' index 35 using 1:3 with linespoints title 'standard fwd f32 causal d=64', \
     'benchmarks/results/default/default.dat' index 36 using 1:3 with linespoints title 'standard fwd f32 d=128', \
     'benchmarks/results/default/default.dat' index 37 using 1:3 with linespoints title 'standard fwd f32 d=64'
