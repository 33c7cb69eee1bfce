import { defineConfig, type Plugin } from 'vite'
import vue from '@vitejs/plugin-vue'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { gzipSync } from 'node:zlib'

/** A .gz beside each text file of the build: the gateway (aiohttp) sends it to browsers that
 *  accept gzip, so nothing is compressed per request. */
function precompress(): Plugin {
  let outDir = 'dist'
  return {
    name: 'warden-precompress',
    apply: 'build',
    configResolved(config) {
      outDir = config.build.outDir
    },
    closeBundle() {
      const walk = (dir: string): string[] =>
        readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
          e.isDirectory() ? walk(join(dir, e.name)) : [join(dir, e.name)],
        )
      for (const file of walk(outDir)) {
        if (/\.(js|css|html|svg|json)$/.test(file)) writeFileSync(`${file}.gz`, gzipSync(readFileSync(file), { level: 9 }))
      }
    },
  }
}

// `npm run dev` serves the app on :5173 and sends /api to a gateway on :8080 (`make run`).
export default defineConfig({
  plugins: [vue(), precompress()],
  server: {
    proxy: { '/api': { target: process.env.WARDEN_API ?? 'http://127.0.0.1:8080', changeOrigin: true } },
  },
  build: {
    target: 'es2022',
    reportCompressedSize: true,
    chunkSizeWarningLimit: 300,
  },
})
