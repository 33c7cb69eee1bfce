import { defineConfig } from 'vite'
import vue from '@vitejs/plugin-vue'

// `npm run dev` serves the app on :5173 and sends /api to a gateway on :8080 (`make run`).
export default defineConfig({
  plugins: [vue()],
  server: {
    proxy: { '/api': { target: process.env.WARDEN_API ?? 'http://127.0.0.1:8080', changeOrigin: true } },
  },
  build: {
    target: 'es2022',
    reportCompressedSize: true,
    chunkSizeWarningLimit: 300,
  },
})
