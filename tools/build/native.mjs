console.log("native build placeholder during bootstrap")
