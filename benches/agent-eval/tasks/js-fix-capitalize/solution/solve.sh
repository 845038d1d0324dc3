sed -i 's/word.charAt(1)/word.charAt(0)/' strings.js
