set terminal pngcairo size 1200,744 font ',10' noenhanced
set key below
set grid
set logscale x 2
set xlabel 'sequence length (keys)'
set output 'benchmarks/results/2026-11-23/sweep/scaling-throughput.png'
set ylabel 'GFLOP/s'
set title 'throughput (AMD EPYC, 2 threads; FMA peak 528 GFLOP/s)'
set arrow from graph 0, first 528.533 to graph 1, first 528.533 nohead dt 2
plot 'benchmarks/results/2026-11-23/sweep/scaling.dat' index 0 using 1:2 with linespoints title 'cpu bwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 1 using 1:2 with linespoints title 'cpu bwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 2 using 1:2 with linespoints title 'cpu bwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 3 using 1:2 with linespoints title 'cpu bwd f32 d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 4 using 1:2 with linespoints title 'cpu fwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 5 using 1:2 with linespoints title 'cpu fwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 6 using 1:2 with linespoints title 'cpu fwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 7 using 1:2 with linespoints title 'cpu fwd f32 d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 8 using 1:2 with linespoints title 'standard bwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 9 using 1:2 with linespoints title 'standard bwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 10 using 1:2 with linespoints title 'standard bwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 11 using 1:2 with linespoints title 'standard bwd f32 d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 12 using 1:2 with linespoints title 'standard fwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 13 using 1:2 with linespoints title 'standard fwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 14 using 1:2 with linespoints title 'standard fwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 15 using 1:2 with linespoints title 'standard fwd f32 d=64'
unset arrow
set output 'benchmarks/results/2026-11-23/sweep/scaling-memory.png'
set logscale y 2
set format y '%.0b %BB'
set ylabel 'extra memory (bytes)'
set title 'memory beyond inputs and outputs'
plot 'benchmarks/results/2026-11-23/sweep/scaling.dat' index 0 using 1:3 with linespoints title 'cpu bwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 1 using 1:3 with linespoints title 'cpu bwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 2 using 1:3 with linespoints title 'cpu bwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 3 using 1:3 with linespoints title 'cpu bwd f32 d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 4 using 1:3 with linespoints title 'cpu fwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 5 using 1:3 with linespoints title 'cpu fwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 6 using 1:3 with linespoints title 'cpu fwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 7 using 1:3 with linespoints title 'cpu fwd f32 d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 8 using 1:3 with linespoints title 'standard bwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 9 using 1:3 with linespoints title 'standard bwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 10 using 1:3 with linespoints title 'standard bwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 11 using 1:3 with linespoints title 'standard bwd f32 d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 12 using 1:3 with linespoints title 'standard fwd f32 causal d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 13 using 1:3 with linespoints title 'standard fwd f32 causal d=64', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 14 using 1:3 with linespoints title 'standard fwd f32 d=128', \
     'benchmarks/results/2026-11-23/sweep/scaling.dat' index 15 using 1:3 with linespoints title 'standard fwd f32 d=64'
