import sys, os
def load(f):
    rows={}
    for line in open(f):
        p=line.split()
        if not p or not p[0].isdigit(): continue
        rows[int(p[0])]=[tuple(map(float,x.split("/"))) for x in p[1:]]
    return rows
tests=["all_reduce","all_gather","reduce_scatter","broadcast","alltoall","sendrecv"]
d2,d4=sys.argv[1],sys.argv[2]
print("| test | 2 ranks | 4 ranks |\n|---|---|---|")
for t in tests:
    cells=[]
    for d,n in ((d2,2),(d4,4)):
        r=load(os.path.join(d,f"compare-{n}r-{t}.txt"))
        out=[]
        for s in (2<<20,8<<20,32<<20):
            ox,*nc=r[s]
            o=min(c[0] for c in nc)/ox[0]; i=min(c[1] for c in nc)/ox[1]
            out.append(f"{o:.2f} ({i:.2f})")
        cells.append(" / ".join(out))
    print(f"| {t} | {cells[0]} | {cells[1]} |")
